"""Expressions for the Relax visitor, other than arithmetic and calls: names (the function's own, its
globals, Python's builtins and the library's operators), unary operators, comparisons, `and`/`or`,
`a if c else b`, attributes and subscripts. Where eager mode has the same rule, it is shared (semantic.py)."""
from __future__ import annotations

import ast
import builtins
import functools
import inspect

import torch
from tvm import relax, tirx

from ..core.errors import Diagnostic
from ..core.types import DtypeName
from . import library, mutation, operators, pytorch, semantic
from .pytorch import indexing
from .scope import Undefined
from .values import (PY_BUILTINS, describe, dtype_of, is_plain, is_python_scalar, is_symbolic, is_tensor,
                     shape_of)

# Python builtins for watching a run, which compiled code cannot call: eager mode runs them.
_EAGER_HINT = ("compiled code does not run Python; to watch values, run the function eagerly: f.eager(...), or "
               "set BABYTRITON_INTERPRET=1")
PYTHON_ONLY = {"print": f"print() cannot be called from @jit code: {_EAGER_HINT}",
               "breakpoint": f"breakpoint() cannot be called from @jit code: {_EAGER_HINT}",
               "input": "input() cannot be called from @jit code: pass values in as parameters",
               "open": "open() cannot be called from @jit code: read files before the call and pass tensors in"}

IDENTITY = {ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}

# Builtins on compile-time sequences: len(), tuple(), list() (comprehensions give tuples).
SEQUENCE_BUILTINS = {"len", "tuple", "list"}



class RelaxExpressions:
    """The expressions of RelaxCodeGen other than arithmetic and calls (a mixin: it uses the visitor's
    builder, emit and the operators of relax_arithmetic.py)."""

    def local(self, name: str, value):
        if isinstance(value, Undefined):  # not assigned on every path to here: the message says why
            raise Diagnostic(value.message)
        return value

    def python_value(self, name: str, value):
        if hasattr(value, "item") and getattr(value, "shape", None) == () and not isinstance(value, torch.Tensor):
            value = value.item()  # numpy scalars
        return value

    def builtin(self, name: str):
        """Python's builtins that fold on compile-time values, and the Relax operators the function
        doesn't bind (`sigmoid(x)`); None for other names."""
        if name in PY_BUILTINS or name in SEQUENCE_BUILTINS:
            return getattr(builtins, name)
        op = library.lookup(name)
        if op is not None:
            return op
        if name in PYTHON_ONLY:
            raise Diagnostic(PYTHON_ONLY[name])
        return None

    def undefined_hint(self, name: str, known: set) -> str:
        return library.did_you_mean(name, known | library.names()) or \
            "; assign it before this line, pass it as a parameter, or define it at module level"

    def visit_UnaryOp(self, node: ast.UnaryOp):
        value = self.visit(node.operand)
        kind = type(node.op)
        if kind in (ast.Not, ast.Invert):  # the rule eager shares
            return semantic.negation(self.builder, operators.SYMBOL[kind], value)
        if not is_tensor(value):
            if is_python_scalar(value) or is_symbolic(value):
                return operators.PY_UNARY[kind](value)
            raise Diagnostic(f"`{operators.SYMBOL[kind]}` cannot be applied to {describe(value)}")
        dtype = dtype_of(value)
        if kind is ast.USub:
            if dtype == "bool":
                raise Diagnostic("`-` on a bool tensor is not supported; use `not` / `~` for logical negation")
            # unsigned: 0 - u, which wraps as torch's `-u` does (TVM's negative multiplies by -1)
            negated = self.emit(relax.op.subtract(self.const(0, dtype), value) if dtype.startswith("uint")
                                else relax.op.negative(value))
            if self.is_weak(value):  # `-s` is still a Python number
                self.weak.append(negated)
            return negated
        return value  # `+`

    def compare(self, op: ast.cmpop, lhs, rhs):
        kind = type(op)
        if kind in (ast.Is, ast.IsNot):  # `mask is None`: the rule eager shares
            return semantic.identity(self.builder, IDENTITY[kind], lhs, rhs)
        if kind in (ast.In, ast.NotIn):
            return self.membership(IDENTITY[kind], lhs, rhs)
        if not (is_tensor(lhs) or is_tensor(rhs)):
            if is_python_scalar(lhs) and is_python_scalar(rhs) or is_symbolic(lhs) \
                    or is_symbolic(rhs):
                return operators.PY_COMPARE[kind](lhs, rhs)
            if is_plain(lhs) and is_plain(rhs):  # dtype names, shapes, None: `x.dtype == "float16"`
                return operators.PY_COMPARE[kind](lhs, rhs)
        lhs, rhs = (self.size_value(v) if is_symbolic(v) else v for v in (lhs, rhs))  # `i < x.size(0)`
        lhs, rhs = self.operand(lhs), self.operand(rhs)
        dtype = self.operator_dtype(operators.SYMBOL[kind], lhs, rhs)
        # TVM's LLVM backend emits a float compare for bool operands; compare them as int8.
        result = self.emit_binary(operators.COMPARE[kind], lhs, rhs, "int8" if dtype == "bool" else dtype,
                                  operators.SYMBOL[kind])
        if self.is_weak(lhs) and self.is_weak(rhs):  # a Python bool, as in Python
            self.weak.append(result)
        return result

    def membership(self, symbol: str, item, container):
        """`item in (a, b)`: on a symbolic size, `item == a or item == b`, known when the code runs
        (for an assert); else the rule eager shares."""
        if isinstance(container, (tuple, list)) and any(map(is_symbolic, (item, *container))):
            equal = [item == c if is_symbolic(item) else c == item for c in container]
            found = functools.reduce(tirx.Or, [e.asobject() if hasattr(e, "asobject") else tirx.const(bool(e))
                                               for e in equal], tirx.const(False))
            return found if symbol == "in" else tirx.Not(found)
        return semantic.membership(self.builder, symbol, item, container)

    def short_circuits(self, value) -> bool:
        return not is_tensor(value)  # tensors combine element-wise

    def logical(self, op: ast.boolop, lhs, rhs):
        return semantic.logical(self.builder, operators.SYMBOL[type(op)], lhs, rhs)  # the rule eager shares

    def visit_IfExp(self, node: ast.IfExp):
        return semantic.if_else(self.builder, self.visit(node.test),  # the rule eager shares
                                lambda: self.visit(node.body), lambda: self.visit(node.orelse))

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        if is_tensor(value):
            return self.tensor_attribute(value, node.attr)
        if isinstance(value, relax.Expr):
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'")
        try:
            return getattr(value, node.attr)
        except AttributeError:
            what = f"`{ast.unparse(node.value)}`" if inspect.ismodule(value) else describe(value)
            hint = library.did_you_mean(node.attr, [n for n in dir(value) if not n.startswith("_")])
            raise Diagnostic(f"{what} has no attribute '{node.attr}'{hint}") from None

    def tensor_attribute(self, value, attr: str):
        if attr == "shape":
            return shape_of(value)
        if attr == "dtype":
            return DtypeName(dtype_of(value))  # equal to the name and to the torch.dtype
        if attr == "ndim":
            return value.ty.ndim
        found, prop = pytorch.tensor_property(self.builder, value, attr)  # x.device, x.mT
        if found:
            return prop
        prop = library.tensor_property(self, value, attr)  # x.T
        if prop is not None:
            return prop
        method = pytorch.method(value, attr) or library.method(value, attr)  # x.exp, called by visit_Call
        if method is not None:
            return method
        known = ["shape", "dtype", "ndim", *library.tensor_attributes(), *pytorch.METHODS, *pytorch.PROPERTIES]
        hint = f"; call the operator instead: {attr}(x)" if attr in library.names() else \
            library.did_you_mean(attr, known)
        # too many to list: torch's methods and attributes are bt.torch_names()'s `Tensor.` entries
        raise Diagnostic(f"tensors have no attribute '{attr}' here{hint} (bt.torch_names() lists those @jit code has)")

    def subscript(self, value, node: ast.Subscript):
        if is_tensor(value):  # torch's indexing; a basic index gives a view in torch (mutation.note_view)
            index = self.visit(node.slice)
            result = indexing.getitem(self.builder, value, index)
            if indexing.is_view(self.builder, value, index):
                mutation.note_view(self, result, value, ast.unparse(node), index)
            return result
        raise Diagnostic(f"{describe(value)} cannot be indexed")
