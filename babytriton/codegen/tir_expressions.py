"""Expressions for the TIR visitor, other than calls: names (a run-time local reads its buffer), attributes
of tensor parameters, element reads with Python's indexing (negative indices, bounds checked where the
analyzer can), and the operators on scalars with torch's promotion and Python's meaning."""
from __future__ import annotations

import ast
import builtins
import difflib

import torch
from tvm import tirx

from ..core.errors import Diagnostic
from ..core.types import TORCH_TO_NAME, is_float_dtype
from . import operators
from .tir_values import INT64, Local, TensorParam, describe, dtype_of, is_expr, is_python, loads_memory, negate
from .values import PY_SCALARS

UNBOUNDED = 1 << 62      # const_int_bound reports "no bound" beyond this


class TIRExpressions:
    """The expressions of TIRCodeGen other than calls (a mixin: it uses the visitor's casts and analyzer)."""

    def visit_Name(self, node: ast.Name):
        name = node.id
        if name in self.gone and name not in self.scope:
            raise Diagnostic(f"'{name}' only exists inside {self.gone[name]}: assign it before that to use it "
                             "after")
        return super().visit_Name(node)

    def local(self, name: str, value):
        return value.buffer[tirx.const(0, INT64)] if isinstance(value, Local) else value

    def builtin(self, name: str):
        return getattr(builtins, name, None)

    def undefined_hint(self, name: str, known: set) -> str:
        hint = difflib.get_close_matches(name, known, n=1)
        return f"; did you mean '{hint[0]}'?" if hint else ""

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        if isinstance(value, TensorParam):
            attrs = {"shape": value.shape, "dtype": value.dtype, "ndim": len(value.shape)}
            if node.attr not in attrs:
                raise Diagnostic(f"tensors have no attribute '{node.attr}' here (available: shape, dtype, ndim)")
            return attrs[node.attr]
        if is_expr(value):
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'")
        try:
            return getattr(value, node.attr)
        except AttributeError:
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'") from None

    def subscript(self, value, node: ast.Subscript):
        if isinstance(value, TensorParam):
            return tirx.BufferLoad(value.buffer, self.indices(value, node))
        raise Diagnostic(f"{describe(value)} cannot be indexed")

    def indices(self, tensor: TensorParam, node: ast.Subscript) -> list:
        """The element's indices: one integer per dimension, negative ones counting from the end
        as in Python; an index provably outside a static size is an error here."""
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(p, ast.Slice) for p in parts):
            raise Diagnostic("the TIR backend reads and writes single elements: index every dimension with an "
                             "integer (slices are not supported)")
        if len(parts) != len(tensor.shape):
            raise Diagnostic(f"'{tensor.name}' has {len(tensor.shape)} dimension(s); index each of them "
                             f"(got {len(parts)} index(es))")
        return [self.index(tensor, axis, part) for axis, part in enumerate(parts)]

    def index(self, tensor: TensorParam, axis: int, part: ast.expr):
        value = self.visit(part)
        size = tensor.shape[axis]
        where = f"dimension {axis} of '{tensor.name}' (size {size})"
        if isinstance(value, bool) or not (isinstance(value, int) or is_expr(value) and "int" in dtype_of(value)):
            raise self.error(part, f"an index must be an integer, got {describe(value)}")
        if isinstance(value, int):
            if isinstance(size, int) and not -size <= value < size:
                raise self.error(part, f"index {value} is out of bounds for {where}")
            return tirx.IntImm(INT64, value) if value >= 0 else self.index_expr(size) + value
        value = self.cast(value, INT64)
        if isinstance(size, int) and not self.unreachable:
            bound = self.analyzer.const_int_bound(value)
            if -UNBOUNDED < bound.min_value and bound.max_value < UNBOUNDED and (
                    bound.max_value >= size or bound.min_value < -size):
                reach = bound.max_value if bound.max_value >= size else bound.min_value
                raise self.error(part, f"index `{ast.unparse(part)}` reaches {reach}, out of bounds for {where}")
        if self.analyzer.can_prove(value >= 0):
            return value
        return tirx.if_then_else(value < 0, value + self.index_expr(size), value)  # Python's a[-1]

    def binary(self, op: ast.operator, lhs, rhs):
        kind = type(op)
        sym = operators.SYMBOL[kind]
        if is_python(lhs) and is_python(rhs):
            try:
                return operators.PY_BINARY[kind](lhs, rhs)
            except (ZeroDivisionError, TypeError) as e:
                raise Diagnostic(f"cannot compute `{sym}` at compile time: {e}") from None
        lhs, rhs = self.scalar(lhs), self.scalar(rhs)
        dtype = self.promote(lhs, rhs)
        if kind in operators.TIR_BITWISE or kind in operators.TIR_SHIFT:
            if is_float_dtype(dtype) or (kind in operators.TIR_SHIFT and dtype == "bool"):
                raise Diagnostic(f"`{sym}` needs integer operands, got {describe(lhs)} and {describe(rhs)}")
            if kind in operators.TIR_SHIFT:
                return operators.TIR_SHIFT[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))
            int_op, bool_op = operators.TIR_BITWISE[kind]
            return (bool_op if dtype == "bool" else int_op)(self.cast(lhs, dtype), self.cast(rhs, dtype))
        if kind is ast.MatMult:
            raise Diagnostic("`@` multiplies whole tensors; the TIR backend works element by element "
                             "(write the loops, or use the Relax backend)")
        if dtype == "bool":
            raise Diagnostic(f"`{sym}` on bools is not supported; use `|`, `&`, `^` or convert with int()")
        if kind in (ast.FloorDiv, ast.Mod) and isinstance(rhs, PY_SCALARS) and rhs == 0:
            raise Diagnostic(f"`{sym}` by zero")
        if kind is ast.Div and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]   # true division, as in Python and torch
        if kind is ast.Pow and not is_float_dtype(dtype):
            if not (isinstance(rhs, int) and rhs >= 0):
                raise Diagnostic("an integer power needs a compile-time exponent >= 0 (or float operands)")
            result = tirx.const(1, dtype)
            for _ in range(rhs):
                result = result * self.cast(lhs, dtype)
            return result
        table = operators.TIR_FLOAT_ARITH if is_float_dtype(dtype) else operators.TIR_INT_ARITH
        return table[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))

    def visit_UnaryOp(self, node: ast.UnaryOp):
        value = self.visit(node.operand)
        kind = type(node.op)
        if isinstance(value, PY_SCALARS):
            return operators.PY_UNARY[kind](value)
        value = self.scalar(value)
        dtype = dtype_of(value)
        if kind is ast.Not:
            return negate(self.condition(value))
        if kind is ast.UAdd:
            return value
        if kind is ast.USub:
            if dtype == "bool":
                raise Diagnostic("`-` on a bool is not supported; use `not`")
            return tirx.const(0, dtype) - value
        if is_float_dtype(dtype):
            raise Diagnostic(f"`~` needs a bool or integer, got {describe(value)}")
        return negate(value) if dtype == "bool" else tirx.bitwise_not(value)

    def compare(self, op: ast.cmpop, lhs, rhs):
        kind = type(op)
        if kind not in operators.TIR_COMPARE:
            raise Diagnostic("the comparisons `is`, `in` and their negations are not supported")
        if is_python(lhs) and is_python(rhs):
            return operators.PY_COMPARE[kind](lhs, rhs)
        lhs, rhs = self.scalar(lhs), self.scalar(rhs)
        dtype = self.promote(lhs, rhs)
        return operators.TIR_COMPARE[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))

    def short_circuits(self, value) -> bool:
        return isinstance(value, PY_SCALARS)

    def logical(self, op: ast.boolop, lhs, rhs):
        if isinstance(lhs, PY_SCALARS) and isinstance(rhs, PY_SCALARS):
            return (lhs and rhs) if isinstance(op, ast.And) else (lhs or rhs)
        for v in (lhs, rhs):
            if not (isinstance(v, bool) or is_expr(v) and dtype_of(v) == "bool"):
                raise Diagnostic(f"`{operators.SYMBOL[type(op)]}` needs bools, got {describe(v)}; compare first, "
                                 "e.g. `(x > 0) and (y > 0)`")
        lhs, rhs = self.cast(lhs, "bool"), self.cast(rhs, "bool")
        # The right side is evaluated at run time only when needed (it may read memory the left side guards).
        if not loads_memory(rhs):
            return tirx.And(lhs, rhs) if isinstance(op, ast.And) else tirx.Or(lhs, rhs)
        if isinstance(op, ast.And):
            return tirx.if_then_else(lhs, rhs, tirx.const(False, "bool"))
        return tirx.if_then_else(lhs, tirx.const(True, "bool"), rhs)

    def visit_IfExp(self, node: ast.IfExp):
        cond = self.condition(self.visit(node.test))
        if isinstance(cond, bool):
            return self.visit(node.body) if cond else self.visit(node.orelse)
        a, b = self.scalar(self.visit(node.body)), self.scalar(self.visit(node.orelse))
        dtype = self.promote(a, b)
        return tirx.if_then_else(cond, self.cast(a, dtype), self.cast(b, dtype))   # only one side is evaluated
