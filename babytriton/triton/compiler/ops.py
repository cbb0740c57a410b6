"""Element-wise operators on block values: typed by semantics.py, computed as TIR expressions
(inlined into whatever consumes them), and pointer arithmetic (a pointer block's offsets)."""
from __future__ import annotations

import ast
import operator

from tvm import tirx

from .. import semantics
from ..language import core
from .values import Block, cast, const, reshaped, scalar

SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
           ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}

# between constexprs: Python's own operators
PYTHON = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_,
          ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
          ast.RShift: operator.rshift, ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
          ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Pow: operator.pow}


def _float_mod(a, b):
    """C's fmod (Triton's frem): the remainder takes the dividend's sign."""
    return a - b * tirx.trunc(a / b)


def _bitwise(int_fn, bool_fn):
    return lambda a, b: bool_fn(a, b) if str(a.ty.dtype) == "bool" else int_fn(a, b)


# symbol -> (integer form, float form); C's truncating // and % (semantics.INTEGER_DIVISION)
_TIR = {
    "+": (operator.add, operator.add), "-": (operator.sub, operator.sub), "*": (operator.mul, operator.mul),
    "/": (None, tirx.Div), "//": (tirx.truncdiv, None), "%": (tirx.truncmod, _float_mod),
    "&": (_bitwise(tirx.bitwise_and, tirx.And), None), "|": (_bitwise(tirx.bitwise_or, tirx.Or), None),
    "^": (_bitwise(tirx.bitwise_xor, tirx.NE), None), "<<": (tirx.shift_left, None),
    ">>": (tirx.shift_right, None),
    "==": (tirx.EQ, tirx.EQ), "!=": (tirx.NE, tirx.NE), "<": (tirx.LT, tirx.LT), "<=": (tirx.LE, tirx.LE),
    ">": (tirx.GT, tirx.GT), ">=": (tirx.GE, tirx.GE),
}


def _python_scalar(value):
    return value if isinstance(value, (bool, int, float)) else None


def _dtype_of(value) -> core.dtype:
    return value.dtype if isinstance(value, Block) else semantics.scalar_dtype(value)


def as_block(value, dtype: core.dtype | None = None) -> Block:
    if isinstance(value, Block):
        return value
    dtype = dtype or semantics.scalar_dtype(value)
    return scalar(dtype, const(value, dtype))


def binary(symbol: str, a, b) -> Block:
    """`a <symbol> b` with at least one block operand."""
    rule = semantics.binary(symbol, _dtype_of(a), _dtype_of(b), _python_scalar(a), _python_scalar(b))
    shape = semantics.broadcast_shapes(*(v.shape if isinstance(v, Block) else () for v in (a, b)))
    if rule.operand is None:   # pointer arithmetic: the pointer's offsets move
        return _pointer_arithmetic(symbol, a, b, shape)
    x, y = as_block(a, rule.operand), as_block(b, rule.operand)
    forms = _TIR[symbol]
    fn = forms[1] if rule.operand.is_floating() else forms[0]
    if fn is None:
        raise semantics.Diagnostic(f"`{symbol}` is not defined for {rule.operand}")
    operand = rule.operand
    return Block(rule.result, shape, lambda index: fn(cast(x.element(index), operand),
                                                      cast(y.element(index), operand)))


def _pointer_arithmetic(symbol: str, a, b, shape) -> Block:
    ptr, offset = (a, b) if isinstance(a, Block) and a.is_pointer else (b, a)
    offset = as_block(offset)
    sign = -1 if symbol == "-" else 1

    def at(index):
        delta = cast(offset.element(index), core.int64)
        return ptr.element(index) + (delta if sign > 0 else -delta)
    return Block(ptr.dtype, shape, at, ptr.base)


def unary(op: type, x: Block) -> Block:
    symbol = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}[op]
    dtype = semantics.unary(symbol, x.dtype)
    if symbol == "+":
        return x
    if symbol == "not":
        return Block(dtype, x.shape, lambda index: tirx.Not(cast(x.at(index), core.int1)))
    if symbol == "~":
        fn = tirx.Not if x.dtype.is_bool() else tirx.bitwise_not
        return Block(dtype, x.shape, lambda index: fn(x.at(index)))
    return Block(dtype, x.shape, lambda index: const(0, dtype) - x.at(index))


def as_bool(value) -> Block:
    block = as_block(value)
    return Block(core.int1, block.shape, lambda index: cast(block.at(index), core.int1))


def where(condition, x, y) -> Block:
    """`x` where `condition`, else `y`: both sides are computed (loads are already in buffers)."""
    cond = as_bool(condition)
    x_dtype, y_dtype = _dtype_of(x), _dtype_of(y)
    dtype, shape = semantics.where(cond.shape, x_dtype, y_dtype, _python_scalar(x), _python_scalar(y),
                                   x.shape if isinstance(x, Block) else (), y.shape if isinstance(y, Block) else ())
    xb, yb = as_block(x, dtype), as_block(y, dtype)
    base = xb.base if xb.is_pointer else None
    return Block(dtype, shape, lambda index: tirx.Select(cond.element(index), cast(xb.element(index), dtype),
                                                         cast(yb.element(index), dtype)), base)


def transpose(x: Block, dims: tuple) -> Block:
    """`x` with its axes permuted (`dims`; none given: reversed)."""
    dims = tuple(dims) or tuple(reversed(range(len(x.shape))))
    if sorted(dims) != list(range(len(x.shape))):
        raise semantics.Diagnostic(f"trans: {list(dims)} is not a permutation of the axes of {list(x.shape)}")
    shape = tuple(x.shape[d] for d in dims)
    inverse = [dims.index(axis) for axis in range(len(dims))]
    return reshaped(x, shape, lambda index: tuple(index[i] for i in inverse))


def reshape(x: Block, shape: tuple) -> Block:
    """`x`'s elements, in row-major order, in a block of `shape`."""
    shape = semantics.block_shape(shape) if shape else ()
    n = 1
    for s in shape:
        n *= s
    if n != x.numel:
        raise semantics.Diagnostic(f"cannot reshape a block of shape {list(x.shape)} into {list(shape)}")

    def at(index):
        flat = tirx.IntImm("int32", 0)
        for size, i in zip(shape, index):
            flat = flat * size + i
        out = []
        for size in reversed(x.shape):
            out.append(tirx.truncmod(flat, size))
            flat = tirx.truncdiv(flat, size)
        return tuple(reversed(out))
    return reshaped(x, shape, at)


# block methods: the builtin each is (x.to(dtype) is tl.cast(x, dtype))
METHODS = {"to": core.cast, "trans": core.trans, "reshape": core.reshape, "view": core.view,
           "broadcast_to": core.broadcast_to, "expand_dims": core.expand_dims, "sum": core.sum, "max": core.max,
           "min": core.min, "argmax": core.argmax, "argmin": core.argmin, "exp": core.exp, "log": core.log,
           "sqrt": core.sqrt, "abs": core.abs, "sigmoid": core.sigmoid}
