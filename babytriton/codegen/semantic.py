"""Python's operators on tensors, as rules the compiler and the eager reference share: each checks
its operands through a library.Builder and makes its result with it (Relax for the compiler, torch
for eager), as Triton's interpreter runs its semantic layer with another builder. A user's mistake
is a Diagnostic, in the same words on both paths."""
from __future__ import annotations

import builtins
import operator

import torch

from ..core.errors import Diagnostic
from ..core.types import DtypeName, is_float_dtype
from . import library
from .values import describe, is_python_scalar, is_symbolic


def operand(b, value):
    """`value`, checked to take part in arithmetic: a tensor or a Python number that fits 64 bits."""
    if isinstance(value, int) and not -2**63 <= value < 2**64:
        raise Diagnostic(f"the int {value} is too big to meet a tensor (torch refuses it too)")
    if b.is_tensor(value) or is_python_scalar(value):
        return value
    if is_symbolic(value):
        raise Diagnostic(f"{describe(value)} is only known at run time; it can be used in shapes, "
                         "not as a tensor value")
    raise Diagnostic(f"expected a tensor or a number, got {b.describe(value)}")


def check_matmul(b, lhs, rhs) -> None:
    """`lhs @ rhs` takes two tensors of one dtype (no promotion, as in torch)."""
    if not (b.is_tensor(lhs) and b.is_tensor(rhs)):
        raise Diagnostic("`@` needs two tensors")
    if b.dtype(lhs) != b.dtype(rhs):
        raise Diagnostic(f"`@` needs operands of one dtype, got {b.dtype(lhs)} and {b.dtype(rhs)}; "
                         "convert one with .astype()")


def bool_op(symbol: str, first, rest, short_circuits, combine):
    """`first and ...` / `first or ...` (symbol "and" / "or"), `rest` the later sides as thunks: a value
    that `short_circuits` (a compile-time one) decides as in Python, evaluating the next side only
    where Python would; otherwise `combine(result, next side)` (element-wise, `logical`)."""
    result = first
    for side in rest:
        if short_circuits(result):
            if symbol == "and" and not result or symbol == "or" and result:
                return result
            result = side()
            continue
        result = combine(result, side())
    return result


def chain(left, comparisons, compare, combine):
    """`a < b < c`: `(a < b) and (b < c)` with b computed once; `comparisons` are (operator, thunk of
    its right side), `compare(op, lhs, rhs)` makes one part, `combine` ands two."""
    result = None
    for op, side in comparisons:
        right = side()
        part = compare(op, left, right)
        result = part if result is None else combine(result, part)
        left = right
    return result


def logical(b, symbol: str, lhs, rhs):
    """`lhs and rhs` / `lhs or rhs` (symbol "and" / "or") once both sides are known: Python's meaning
    on compile-time values; with a tensor, element-wise, on bool tensors and Python bools only."""
    if not (b.is_tensor(lhs) or b.is_tensor(rhs)):
        return (lhs and rhs) if symbol == "and" else (lhs or rhs)
    for v in (lhs, rhs):
        if b.is_tensor(v) and b.dtype(v) != "bool" or not b.is_tensor(v) and not isinstance(v, bool):
            raise Diagnostic(f"`{symbol}` needs bool tensors, got {b.describe(v)}; "
                             "compare first, e.g. `(x > 0) and (y > 0)`")
    return b.logical(symbol, lhs, rhs)


def negation(b, symbol: str, value):
    """`not value` / `~value` (symbol "not" / "~"): Python's on compile-time values; on tensors,
    `not` takes bools, `~` bools (logical) and integers (bitwise)."""
    if not b.is_tensor(value):
        if is_python_scalar(value) or is_symbolic(value):
            return operator.not_(value) if symbol == "not" else operator.invert(value)
        raise Diagnostic(f"`{symbol}` cannot be applied to {b.describe(value)}")
    dtype = b.dtype(value)
    if symbol == "~":
        if is_float_dtype(dtype):
            raise Diagnostic(f"`~` needs a bool or integer tensor, got {b.describe(value)}")
        return b.logical_not(value) if dtype == "bool" else b.bitwise_not(value)
    if dtype != "bool":
        raise Diagnostic(f"`not` needs a bool tensor, got {b.describe(value)}; compare it first, e.g. `x == 0`")
    return b.logical_not(value)


def identity(b, symbol: str, lhs, rhs):
    """`lhs is rhs` / `lhs is not rhs` (symbol "is" / "is not"): Python's on compile-time values
    (`mask is None` picks a path at compile time); a tensor is never None. A dtype is its name here,
    so `x.dtype is torch.float16` could never hold: refused, pointing at `==`."""
    if any(isinstance(v, DtypeName) for v in (lhs, rhs)) and all(isinstance(v, (str, torch.dtype)) for v in (lhs, rhs)):
        raise Diagnostic(f"`{symbol}` does not compare dtypes in @jit code (a tensor's dtype is read as its "
                         "name here): use `==` / `!=`, e.g. `x.dtype == torch.float16`")
    tensors = [v for v in (lhs, rhs) if b.is_tensor(v)]
    if tensors and not any(v is None for v in (lhs, rhs)):
        raise Diagnostic(f"`{symbol}` between tensors is not supported in @jit code (tensors are values "
                         "here, not objects); compare them with ==, or a value with None")
    same = lhs is rhs
    return same if symbol == "is" else not same


def membership(b, symbol: str, item, container):
    """`item in container` / `item not in container` (symbol "in" / "not in") of compile-time values:
    `dim in (-1, 2)`, `x.dtype in (torch.float16, torch.bfloat16)`."""
    if b.is_tensor(container) or not isinstance(container, (tuple, list, str)):
        raise Diagnostic(f"`{symbol}` needs a tuple, list or string of compile-time values on its right, "
                         f"got {b.describe(container)}")
    if b.is_tensor(item):
        raise Diagnostic(f"`{symbol}` with a tensor on its left is not supported in @jit code; compare "
                         "element-wise with == and combine the results with |")
    found = item in container
    return found if symbol == "in" else not found


def if_else(b, cond, body, orelse):
    """`body() if cond else orelse()`: on a compile-time condition one side, as in Python; on a bool
    tensor, both sides computed and chosen element-wise in their common dtype."""
    if not b.is_tensor(cond):
        if is_symbolic(cond):
            raise Diagnostic("a condition on a symbolic size is only known at run time; "
                             "compare tensors instead")
        return body() if cond else orelse()
    if b.dtype(cond) != "bool":
        raise Diagnostic(f"the condition must be a bool tensor, got {b.describe(cond)}")
    v1, v2 = body(), orelse()
    x1, x2 = b.operand(v1), b.operand(v2)
    result = b.select(cond, x1, x2, b.promote(x1, x2))
    # Python picks one of two numbers by a one-element condition: the result is still a number
    return b.weak(result) if b.ndim(cond) == 0 and b.is_weak(v1) and b.is_weak(v2) else result


def python_call(b, func, args: list, kwargs: dict):
    """A builtin (abs, min, max, round, ...) or math function: Python's on compile-time numbers; on
    tensors, the library op of the same name (`max(x, axis=1)` is Relax's max)."""
    if all(is_python_scalar(a) for a in args) and all(is_python_scalar(v) for v in kwargs.values()) or \
            func in (float, int) and len(args) == 1 and isinstance(args[0], str):  # float("-inf")
        try:
            return func(*args, **kwargs)
        except ValueError as e:
            raise Diagnostic(f"{func.__name__}(): {e}") from None
    if getattr(func, "__module__", None) == "math":  # math's functions compute in Python floats (float64)
        args = [b.weak(b.as_tensor(a, "float64")) if b.is_tensor(a) and b.is_weak(a) and
                not is_float_dtype(b.dtype(a)) else a for a in args]
    if func in (builtins.max, builtins.min) and len(args) > 1 and b.is_tensor(args[1]):
        wide = "maximum" if func is builtins.max else "minimum"
        raise Diagnostic(f"{func.__name__}(a, b) of tensors: use {wide}(a, b) for the element-wise "
                         f"{wide}; {func.__name__}(x, axis=...) reduces along axes")
    op = library.lookup(func.__name__)
    if op is not None and any(b.is_tensor(a) for a in [*args, *kwargs.values()]):
        return library.apply(b, op, args, kwargs)
    convert = f"; convert a tensor with .astype('{ {int: 'int64', float: 'float32', bool: 'bool'}[func] }')" \
        if func in (int, float, bool) else ""
    raise Diagnostic(f"{func.__name__}() works on compile-time numbers only, got "
                     f"{', '.join(b.describe(a) for a in args)}{convert}")
