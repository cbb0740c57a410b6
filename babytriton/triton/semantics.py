"""The typing rules of Triton's language, as pure functions of dtypes, shapes and Python scalars: the
interpreter and the compiler both ask here, so each rule exists once. A program the rules reject raises
`Diagnostic` (the caller puts it at the user's expression).

Each rule names the Triton source it follows: triton-lang/triton python/triton/language/semantic.py
(`computation_type_impl`, `binary_op_type_checking_impl`, `truediv`, `floordiv`, `mod`, `cast`, `dot`,
`_load_legacy`, `_store_legacy`, `arange`), core.py (`tensor.__rshift__`, `dtype.UINT_TYPES`, `_shape_check`),
standard.py (`_pick_sum_dtype`, `max`, `min`) and math.py (`_check_dtype`)."""
from __future__ import annotations

import builtins
from dataclasses import dataclass

from ..core.errors import Diagnostic
from .language import core as tl

# semantic.py to_tensor_type: a Python bool is int1; an int is int32 when it fits, then uint32, int64,
# uint64; a float is fp32 unless its magnitude is outside fp32's normal range (then fp64)
_FP32_MIN_NORMAL, _FP32_MAX = 2.0 ** -126, (2 - 2 ** -23) * 2.0 ** 127

# core.py TRITON_MAX_TENSOR_NUMEL: the most elements a block may have
MAX_NUMEL = 1048576
# the smallest M, N and K `tl.dot` takes on NVIDIA GPUs (semantic.py dot: min_dot_size)
MIN_DOT_SIZE = 16

# integer `//` and `%` are C's (semantic.py floordiv: create_sdiv; mod: create_srem / frem): the quotient
# truncates toward zero and the remainder takes the dividend's sign, unlike Python's floor; between
# Python ints (constexprs) Python's own operators apply, as Triton folds them in Python
INTEGER_DIVISION = "truncate"

ARITHMETIC = ("+", "-", "*", "/", "//", "%")
BITWISE = ("&", "|", "^", "<<", ">>")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
ELEMENTWISE = ("maximum", "minimum", "where", "fma")

# math.py: `@_check_dtype(dtypes=["fp32", "fp64"])` on these; fp16, bf16 and integers are refused
FLOAT_ONLY_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil", "sigmoid")
FP32_ONLY_MATH = ("sqrt_rn",)


@dataclass(frozen=True)
class Binary:
    """How a binary operation runs: both operands cast to `operand` (None: pointer arithmetic, the
    offset stays an integer), the result of dtype `result`."""
    operand: tl.dtype | None
    result: tl.dtype


def scalar_dtype(value) -> tl.dtype:
    """The dtype a Python scalar takes in a kernel (semantic.py to_tensor_type)."""
    value = tl.unwrap(value)
    if isinstance(value, bool):
        return tl.int1
    if isinstance(value, int):
        for lo, hi, dtype in ((-2 ** 31, 2 ** 31, tl.int32), (2 ** 31, 2 ** 32, tl.uint32),
                              (-2 ** 63, 2 ** 63, tl.int64), (2 ** 63, 2 ** 64, tl.uint64)):
            if lo <= value < hi:
                return dtype
        raise Diagnostic(f"the integer {value} does not fit in 64 bits")
    if isinstance(value, float):
        mag = builtins.abs(value)
        fits = mag in (0.0, float("inf")) or value != value or _FP32_MIN_NORMAL <= mag <= _FP32_MAX
        return tl.float32 if fits else tl.float64
    raise Diagnostic(f"a value of type {type(value).__name__} cannot be used in a kernel's arithmetic")


def argument_dtype(value) -> tl.dtype:
    """The type of a runtime (not constexpr) int, float or bool kernel argument (runtime/jit.py
    mangle_type): int32 when it fits, uint64 from 2**63, int64 otherwise; a float is fp32, a bool int1."""
    if isinstance(value, bool):
        return tl.int1
    if isinstance(value, int):
        if -2 ** 31 <= value < 2 ** 31:
            return tl.int32
        if not -2 ** 63 <= value < 2 ** 64:
            raise Diagnostic(f"the integer {value} does not fit in 64 bits")
        return tl.uint64 if value >= 2 ** 63 else tl.int64
    if isinstance(value, float):
        return tl.float32
    raise Diagnostic(f"a {type(value).__name__} cannot be passed to a kernel (tensors, ints, floats and bools can; "
                     "other values need a tl.constexpr parameter)")


def _kind(dtype: tl.dtype) -> int:
    """core.py dtype.kind(): BOOLEAN < INTEGRAL < FLOATING."""
    return 0 if dtype.is_bool() else 1 if dtype.is_int() else 2


def integer_promote(a: tl.dtype, b: tl.dtype) -> tl.dtype:
    """C's usual arithmetic conversions (semantic.py integer_promote_impl)."""
    a_unsigned, b_unsigned = a.is_int_unsigned(), b.is_int_unsigned()
    if a_unsigned == b_unsigned:
        return a if a.int_bitwidth > b.int_bitwidth else b
    if a_unsigned:
        return a if a.int_bitwidth >= b.int_bitwidth else b
    return b if b.int_bitwidth >= a.int_bitwidth else a


def computation_dtype(a: tl.dtype, b: tl.dtype, a_scalar: bool = False, b_scalar: bool = False,
                      div_or_mod: bool = False) -> tl.dtype:
    """The dtype both operands of an arithmetic operation are cast to (semantic.py computation_type_impl).
    A Python scalar of a kind no higher than the block's (bool < int < float) does not widen it; fp16
    with anything but fp32/fp64 is fp16 and two bf16 are bf16, except that `/` and `%` of 16-bit floats
    run in fp32; bf16 with anything else is fp32."""
    if a_scalar != b_scalar:
        scalar, block = (a, b) if a_scalar else (b, a)
        if _kind(scalar) <= _kind(block):
            return tl.float32 if div_or_mod and block in (tl.float16, tl.bfloat16) else block
    for wide in (tl.float64, tl.float32):
        if wide in (a, b):
            return wide
    if tl.float16 in (a, b):
        return tl.float32 if div_or_mod else tl.float16
    if a == b == tl.bfloat16:
        return tl.float32 if div_or_mod else tl.bfloat16
    if tl.bfloat16 in (a, b):
        return tl.float32
    if div_or_mod and a.is_int_unsigned() != b.is_int_unsigned():
        raise Diagnostic(f"cannot use /, // or % between {a} and {b}: they differ in signedness; cast one of them")
    return integer_promote(a, b)


def _check_scalar_fits(dtype: tl.dtype, value) -> None:
    """binary_op_type_checking_impl: a Python int taking a block's integer type must fit in it."""
    if value is None or not dtype.is_int() or isinstance(value, float):
        return
    if value < 0 and dtype.is_int_unsigned():
        raise Diagnostic(f"cannot combine the unsigned {dtype} with the negative scalar {value}: cast one of them")
    bits = dtype.int_bitwidth
    lo, hi = (0, 2 ** bits - 1) if dtype.is_int_unsigned() else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    if not lo <= value <= hi:
        raise Diagnostic(f"the scalar {value} is out of range for {dtype}")


def _pointer_arithmetic(op: str, a: tl.dtype, b: tl.dtype) -> Binary:
    """semantic.py add/sub with check_ptr_type_impl: pointer + integer, integer + pointer, pointer - integer."""
    ptr, other = (a, b) if a.is_ptr() else (b, a)
    allowed = op == "+" or (op == "-" and a.is_ptr() and not b.is_ptr())
    if not allowed or other.is_ptr() or other.is_floating():
        raise Diagnostic(f"invalid operands of {op}: {a!r} and {b!r} (a pointer moves only by integer offsets)")
    return Binary(None, ptr)


def binary(op: str, a: tl.dtype, b: tl.dtype, a_scalar=None, b_scalar=None) -> Binary:
    """The dtypes of `a <op> b`; `a_scalar`/`b_scalar` are the operand's Python value when it is a
    Python scalar (which does not widen a block of its kind), else None."""
    if a.is_ptr() or b.is_ptr():
        if op in ("+", "-"):
            return _pointer_arithmetic(op, a, b)
        if op in ("==", "!=") and a == b:
            return Binary(tl.int64, tl.int1)
        raise Diagnostic(f"invalid operands of {op}: {a!r} and {b!r}")
    div_or_mod = op in ("/", "//", "%")
    operand = computation_dtype(a, b, a_scalar is not None, b_scalar is not None, div_or_mod)
    _check_scalar_fits(operand, a_scalar)
    _check_scalar_fits(operand, b_scalar)
    if op in COMPARISONS:
        return Binary(operand, tl.int1)
    if op == "/":  # semantic.py truediv: integers divide in fp32
        result = operand if operand.is_floating() else tl.float32
        return Binary(result, result)
    if op in BITWISE or op == "//":
        if not operand.is_int():
            raise Diagnostic(f"{op} takes integers, not {a} and {b}")
    return Binary(operand, operand)


def shift_right_kind(dtype: tl.dtype) -> str:
    """core.py tensor.__rshift__: arithmetic (sign-filling) for signed integers, logical otherwise."""
    return "arithmetic" if dtype.is_int_signed() else "logical"


def unary(op: str, a: tl.dtype) -> tl.dtype:
    """The dtype of `-a`, `+a`, `~a` (semantic.py minus / invert) or `not a`."""
    if op == "not":
        return tl.int1
    if a.is_ptr() or (op == "~" and a.is_floating()):
        raise Diagnostic(f"wrong type argument to unary {op}: {a!r}")
    return a


def math(fn: str, a: tl.dtype) -> tl.dtype:
    """The dtype of a one-argument math function of `a` (math.py `_check_dtype`)."""
    allowed = ("fp32",) if fn in FP32_ONLY_MATH else ("fp32", "fp64") if fn in FLOAT_ONLY_MATH else None
    if allowed and a.name not in allowed:
        raise Diagnostic(f"tl.{fn} takes {' or '.join(allowed)}, not {a.name}: convert with .to(tl.float32)")
    if a.is_ptr():
        raise Diagnostic(f"tl.{fn} takes numbers, not {a!r}")
    return a


def sum_dtype(a: tl.dtype, dtype: tl.dtype | None = None) -> tl.dtype:
    """standard.py _pick_sum_dtype: integers narrower than 32 bits sum in 32 bits of their signedness
    (int1 counts as unsigned: uint32); a given `dtype` wins."""
    if dtype is not None:
        return dtype
    if a.is_int() and a.int_bitwidth < 32:
        return tl.uint32 if a.is_int_unsigned() else tl.int32
    return a


def max_min_dtype(a: tl.dtype, return_indices: bool = False) -> tl.dtype:
    """standard.py max/min: bf16 becomes fp32; without indices, anything narrower than 32 bits is
    widened to fp32 or int32."""
    if a == tl.bfloat16:
        return tl.float32
    if not return_indices and a.primitive_bitwidth < 32:
        return tl.float32 if a.is_floating() else tl.int32
    return a


INDEX_DTYPE = tl.int32  # argmax/argmin and max/min's indices (standard.py: int32 index blocks)


def reduce_shape(shape: tuple, axis, keep_dims: bool = False) -> tuple:
    """The shape left by reducing `shape` along `axis` (None: every axis; negative counts from the end)."""
    shape = tuple(shape)
    if axis is None:
        return tuple(1 for _ in shape) if keep_dims else ()
    axis = tl.unwrap(axis)
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        raise Diagnostic(f"axis {axis} is out of range for a block of shape {list(shape)}")
    axis %= len(shape)
    return shape[:axis] + ((1,) if keep_dims else ()) + shape[axis + 1:]


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """Numpy's broadcasting (semantic.py broadcast_impl_value): ranks aligned on the right, a 1 stretches."""
    a, b = tuple(a), tuple(b)
    rank = builtins.max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise Diagnostic(f"cannot broadcast blocks of shapes {list(a)} and {list(b)}: {x} and {y} at axis {i}")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_to(shape: tuple, target: tuple) -> tuple:
    """semantic.py broadcast_impl_shape: `shape` stretched to `target` (same rank, or a scalar)."""
    if shape and len(shape) != len(target):
        raise Diagnostic(f"cannot broadcast a block of shape {list(shape)} to {list(target)}: ranks differ")
    if shape and broadcast_shapes(shape, target) != tuple(target):
        raise Diagnostic(f"cannot broadcast a block of shape {list(shape)} to {list(target)}")
    return tuple(target)


def block_shape(shape) -> tuple:
    """core.py _shape_check / validate_block_shape: constexpr ints, each a power of two, not too many."""
    shape = tuple(tl.unwrap(d) for d in (shape if isinstance(shape, (list, tuple)) else [shape]))
    numel = 1
    for d in shape:
        if not isinstance(d, int) or isinstance(d, bool):
            raise Diagnostic(f"a block's shape must be constexpr ints, got {list(shape)}")
        if d <= 0 or d & (d - 1):
            raise Diagnostic(f"a block's sizes must be powers of two, got {list(shape)}")
        numel *= d
    if numel > MAX_NUMEL:
        raise Diagnostic(f"a block of shape {list(shape)} has {numel} elements, more than Triton's {MAX_NUMEL}")
    return shape


def arange(start, end) -> tuple:
    """semantic.py arange: constexpr int bounds within int32, end > start, end - start a power of two."""
    start, end = tl.unwrap(start), tl.unwrap(end)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        raise Diagnostic("tl.arange's bounds must be constexpr ints")
    if start >> 32 or end >> 32:
        raise Diagnostic("tl.arange's bounds must fit in int32")
    if end <= start:
        raise Diagnostic(f"tl.arange's end ({end}) must be greater than its start ({start})")
    return block_shape([end - start])


def program_axis(axis) -> int:
    """semantic.py program_id: the grid has axes 0, 1 and 2."""
    axis = tl.unwrap(axis)
    if axis not in (0, 1, 2):
        raise Diagnostic(f"program_id/num_programs axis must be 0, 1 or 2, got {axis!r}")
    return axis


def cast(src: tl.dtype, dst: tl.dtype, bitcast: bool = False) -> tl.dtype:
    """semantic.py cast/bitcast: any number to any number (int1 is `!= 0`); pointers only to int64/int1
    or pointers; a bitcast keeps the bit width."""
    if not isinstance(dst, tl.dtype):
        raise Diagnostic(f"expected a dtype (tl.float32, ...), got {dst!r}")
    if bitcast and not (src.is_ptr() or dst.is_ptr()) and src.primitive_bitwidth != dst.primitive_bitwidth:
        raise Diagnostic(f"cannot bitcast {src} ({src.primitive_bitwidth} bits) to {dst} "
                         f"({dst.primitive_bitwidth} bits)")
    if src.is_ptr() and not (dst.is_ptr() or dst in (tl.int64, tl.int1)):
        raise Diagnostic(f"cannot cast {src!r} to {dst}")
    if dst.is_ptr() and not (src.is_ptr() or src.is_int()):
        raise Diagnostic(f"cannot cast {src} to {dst!r}")
    return dst


def load(pointer: tl.dtype, pointer_shape: tuple, mask_shape: tuple | None, has_other: bool) -> tuple:
    """semantic.py _load_legacy: the loaded dtype and shape (the pointer's element type; mask and other
    broadcast to the pointer's shape); `other` needs a `mask`."""
    if not pointer.is_ptr():
        raise Diagnostic(f"tl.load takes a pointer (a tensor argument plus offsets), not {pointer!r}")
    if has_other and mask_shape is None:
        raise Diagnostic("tl.load's `other` needs a `mask`")
    if mask_shape is not None and not pointer_shape and mask_shape:
        raise Diagnostic("tl.load's mask cannot be a block when the pointer is a scalar")
    shape = tuple(pointer_shape)
    if mask_shape is not None and shape:
        shape = broadcast_shapes(shape, mask_shape)
    return pointer.element_ty, shape


def store(pointer: tl.dtype, pointer_shape: tuple, value_shape: tuple, mask_shape: tuple | None) -> tl.dtype:
    """semantic.py _store_legacy: the value is broadcast to the pointer's shape and implicitly cast to its
    element type (returned); a scalar pointer takes only a scalar value."""
    if not pointer.is_ptr():
        raise Diagnostic(f"tl.store takes a pointer (a tensor argument plus offsets), not {pointer!r}")
    if not pointer_shape and (value_shape or mask_shape):
        raise Diagnostic("tl.store's value and mask cannot be blocks when the pointer is a scalar")
    broadcast_to(value_shape, pointer_shape)
    if mask_shape is not None:
        broadcast_to(mask_shape, pointer_shape)
    return pointer.element_ty


def atomic(op: str, pointer: tl.dtype, value: tl.dtype) -> tl.dtype:
    """semantic.py atom_red_typechecking_impl: the value is cast to the element type; the result (the old
    values) has it. 16-bit and 8-bit integers and bool have no atomics."""
    if not pointer.is_ptr():
        raise Diagnostic(f"tl.atomic_{op} takes a pointer, not {pointer!r}")
    elt = pointer.element_ty
    if elt.is_bool() or (elt.is_int() and elt.int_bitwidth < 32) or elt == tl.bfloat16 and op != "add":
        raise Diagnostic(f"tl.atomic_{op} does not support {elt}")
    return elt


def dot(a: tl.dtype, b: tl.dtype, a_shape: tuple, b_shape: tuple, acc: tl.dtype | None = None,
        acc_shape: tuple | None = None, out_dtype: tl.dtype = tl.float32) -> tuple:
    """semantic.py dot: two blocks of one dtype, ranks 2 (or 3, batched) with K matching and M, N, K at
    least 16; int8 accumulates in int32, floats in fp32 (fp16 in fp16 when out_dtype=fp16). Returns the
    result's dtype and shape; an `acc` must already have them."""
    if len(a_shape) not in (2, 3) or len(a_shape) != len(b_shape):
        raise Diagnostic(f"tl.dot takes two blocks of rank 2 (or 3), got shapes {list(a_shape)} and {list(b_shape)}")
    if a != b:
        raise Diagnostic(f"tl.dot's operands must have one dtype, got {a} and {b}")
    if a_shape[-1] != b_shape[-2] or a_shape[:-2] != b_shape[:-2]:
        raise Diagnostic(f"tl.dot cannot multiply shapes {list(a_shape)} and {list(b_shape)}")
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if builtins.min(m, n, k) < MIN_DOT_SIZE:
        raise Diagnostic(f"tl.dot needs M, N and K of at least {MIN_DOT_SIZE}, got M={m}, N={n}, K={k}")
    if a.is_int():
        if a != tl.int8:
            raise Diagnostic(f"tl.dot takes int8, fp16, bf16, fp32 or fp64 blocks, not {a}")
        result = tl.int32
    elif a == tl.float16 and out_dtype == tl.float16:
        result = tl.float16
    else:
        result = tl.float64 if a == tl.float64 else tl.float32
    shape = tuple(a_shape[:-1]) + (n,)
    if acc is not None and (acc != result or tuple(acc_shape) != shape):
        raise Diagnostic(f"tl.dot's accumulator must be {result} of shape {list(shape)}, got {acc} of shape "
                         f"{list(acc_shape)}")
    return result, shape


def where(cond_shape: tuple, x: tl.dtype, y: tl.dtype, x_scalar=None, y_scalar=None, x_shape=(), y_shape=()):
    """semantic.py where: the condition becomes int1; x and y promote as an arithmetic pair; all three
    broadcast. Returns the result's dtype and shape."""
    operand = binary("+", x, y, x_scalar, y_scalar).result if not (x.is_ptr() or y.is_ptr()) else x
    return operand, broadcast_shapes(broadcast_shapes(cond_shape, x_shape), y_shape)
