"""Calls for the TIR visitor: len(), Python's builtins and math folded on compile-time numbers, min/max,
int/float/bool conversions and TIR's math intrinsics on run-time scalars (operators.TIR_MATH)."""
from __future__ import annotations

import ast

import torch
from tvm import tirx

from ..core.errors import Diagnostic
from ..core.types import TORCH_TO_NAME, is_float_dtype
from . import operators
from .tir_values import INT64, TensorParam, describe, join, kind_of, parallel, storage_dtype
from .values import PY_BUILTINS, PY_SCALARS


class TIRCalls:
    """The calls of TIRCodeGen (a mixin: it uses the visitor's casts)."""

    def visit_Call(self, node: ast.Call):
        func = self.visit(node.func)
        args = [self.visit(a) for a in node.args]
        if node.keywords:
            raise Diagnostic(f"`{ast.unparse(node.func)}` takes no keyword arguments in @jit code")
        if func is range or func is parallel:
            raise Diagnostic(f"{ast.unparse(node.func)}() only appears as the iterable of a for loop")
        if func is len:
            if len(args) != 1:
                raise Diagnostic("len() takes exactly one argument")
            (value,) = args
            return value.shape[0] if isinstance(value, TensorParam) else len(value)
        if all(isinstance(a, PY_SCALARS) for a in args) and (
                func in PY_BUILTINS.values() or getattr(func, "__module__", None) == "math"):
            return func(*args)   # compile-time arithmetic
        if func in (min, max):
            return self.min_max(func, args)
        if func in (int, float, bool):
            if len(args) != 1:
                raise Diagnostic(f"{func.__name__}() takes one argument")
            dtype = {int: INT64, float: TORCH_TO_NAME[torch.get_default_dtype()], bool: "bool"}[func]
            return self.cast(self.scalar(args[0]), dtype)
        try:
            intrinsic, rule = operators.TIR_MATH[func]
        except (KeyError, TypeError):
            raise Diagnostic(f"cannot call `{ast.unparse(node.func)}` ({describe(func)}) from a "
                             "backend='tir' function") from None
        return self.math(intrinsic, rule, [self.scalar(a) for a in args], ast.unparse(node.func))

    def min_max(self, func, args):
        if len(args) < 2:
            raise Diagnostic(f"{func.__name__}() of run-time values takes two or more numbers")
        result = self.scalar(args[0])
        for arg in args[1:]:
            dtype = self.promote(result, self.scalar(arg))
            result = (tirx.min if func is min else tirx.max)(self.cast(result, dtype), self.cast(arg, dtype))
        return result

    def math(self, intrinsic, rule: str, args: list, name: str):
        dtype = kind_of(args[0])
        for arg in args[1:]:
            dtype = join(dtype, kind_of(arg))
        dtype = storage_dtype(dtype)
        if rule in ("float", "int") and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]
        try:
            result = intrinsic(*[self.cast(a, dtype) for a in args])
        except TypeError:
            raise Diagnostic(f"{name}() got {len(args)} argument(s)") from None
        return self.cast(result, INT64) if rule == "int" else result
