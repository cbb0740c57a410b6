"""babytriton.triton.language (the `tl` names) and semantics.py (the typing rules), each rule checked
against what Triton's sources do (the function named in each test's comment: triton-lang/triton
python/triton/language/semantic.py unless said otherwise)."""
import inspect

import pytest
import torch

import babytriton.triton.language as tl
from babytriton.core.errors import Diagnostic
from babytriton.triton import semantics as sem


def test_dtypes_carry_triton_tvm_and_torch_names():
    assert (tl.float32.name, tl.float32.tvm, tl.float32.torch) == ("fp32", "float32", torch.float32)
    assert (tl.bfloat16.name, tl.int1.name, tl.int1.tvm) == ("bf16", "int1", "bool")
    assert tl.float16.is_floating() and not tl.float16.is_int()
    assert tl.uint8.is_int_unsigned() and not tl.uint8.is_int_signed()
    # core.py dtype.UINT_TYPES lists int1: booleans count as unsigned
    assert tl.int1.is_bool() and tl.int1.is_int() and tl.int1.is_int_unsigned()
    assert tl.int64.primitive_bitwidth == 64 and tl.bfloat16.primitive_bitwidth == 16
    assert tl.from_torch(torch.bfloat16) is tl.bfloat16
    with pytest.raises(ValueError, match="complex64"):
        tl.from_torch(torch.complex64)


def test_pointer_type():
    p = tl.pointer_type(tl.float16)
    assert p.is_ptr() and p.element_ty is tl.float16 and p.name == "*fp16"
    assert p == tl.pointer_type(tl.float16) and p != tl.pointer_type(tl.float32) and p != tl.float16


def test_constexpr_wraps_and_compares():
    c = tl.constexpr(tl.constexpr(8))
    assert c.value == 8 and c == 8 and tl.unwrap(c) == 8 and tl.unwrap(3) == 3 and len(range(c)) == 8


def test_constexpr_arithmetic_gives_constexprs():
    # core.py class constexpr: its operators wrap Python's (a global `GROUP = tl.constexpr(8)` in host code)
    c = tl.constexpr(8)
    for value, expected in [(64 // c, 8), (c * 4, 32), (3 - c, -5), (c / 2, 4.0), (c % 3, 2), (2 ** c, 256),
                            (c >> 1, 4), (1 << c, 256), (c & 12, 8), (c | 1, 9), (c ^ c, 0), (-c, -8), (~c, -9),
                            (c < 9, True), (c >= 9, False), (c != 8, False)]:
        assert isinstance(value, tl.constexpr) and value.value == expected


def test_builtins_are_marked_and_keep_tritons_signatures():
    for fn in (tl.load, tl.store, tl.dot, tl.sum, tl.program_id, tl.arange, tl.where, tl.atomic_add, tl.range):
        assert tl.is_builtin(fn)
    assert not tl.is_builtin(torch.exp)
    assert list(inspect.signature(tl.load).parameters)[:3] == ["pointer", "mask", "other"]
    assert inspect.signature(tl.dot).parameters["out_dtype"].default is tl.float32
    assert tl.math.exp is tl.exp and tl.print is tl.device_print


def test_a_builtin_outside_a_kernel_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"tl.load can only be called inside a @triton.jit kernel"):
        tl.load(None)


def test_an_unknown_name_is_refused():
    with pytest.raises(AttributeError, match="tl.make_block_ptr is not part of babytriton's Triton language"):
        tl.make_block_ptr  # noqa: B018


# --- promotion ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, expected", [
    (tl.float16, tl.bfloat16, tl.float16),   # computation_type_impl 3): fp16 with any non-fp32/64 is fp16
    (tl.bfloat16, tl.bfloat16, tl.bfloat16),  # 4) bf16 only with bf16
    (tl.bfloat16, tl.int32, tl.float32),      # 4) bf16 with anything else is fp32
    (tl.float16, tl.float32, tl.float32),     # 2)
    (tl.float64, tl.float16, tl.float64),     # 1)
    (tl.int16, tl.float16, tl.float16),
    (tl.int64, tl.int32, tl.int64),           # 6) integer_promote_impl: the wider
    (tl.int8, tl.uint8, tl.uint8),            # unsigned wins at equal width
    (tl.int32, tl.uint8, tl.int32),           # the wider signed wins
    (tl.int1, tl.int32, tl.int32),
])
def test_promotion_of_two_blocks(a, b, expected):
    assert sem.computation_dtype(a, b) == expected
    assert sem.computation_dtype(b, a) == expected


@pytest.mark.parametrize("block, scalar, op, expected", [
    (tl.float16, 2.0, "*", tl.float16),   # computation_type_impl 0): a float scalar does not widen fp16
    (tl.bfloat16, 1, "+", tl.bfloat16),
    (tl.float16, 2.0, "/", tl.float32),   # ... except / and % of 16-bit floats, in fp32
    (tl.int8, 3, "+", tl.int8),           # an int scalar does not widen int8
    (tl.int32, 0.5, "*", tl.float32),     # a float scalar is of a higher kind than an int block
    (tl.int32, 2, "/", tl.float32),       # truediv: integers divide in fp32
    (tl.int1, 1, "+", tl.int32),          # bool block with an int scalar: integer promotion
    (tl.int32, 2, "<", tl.int1),          # comparisons give int1
])
def test_promotion_with_a_python_scalar(block, scalar, op, expected):
    assert sem.binary(op, block, sem.scalar_dtype(scalar), None, scalar).result == expected
    assert sem.binary(op, sem.scalar_dtype(scalar), block, scalar, None).result == expected


@pytest.mark.parametrize("value, expected", [
    (True, tl.int1), (7, tl.int32), (-2 ** 31, tl.int32), (2 ** 31, tl.uint32), (2 ** 40, tl.int64),
    (-2 ** 40, tl.int64), (2 ** 63, tl.uint64), (1.5, tl.float32), (0.0, tl.float32), (float("inf"), tl.float32),
    (1e-40, tl.float64), (1e300, tl.float64),
])
def test_python_scalar_types(value, expected):
    # to_tensor_type
    assert sem.scalar_dtype(value) == expected


@pytest.mark.parametrize("op, a, b, a_scalar, b_scalar, match", [
    ("+", tl.int8, tl.int32, None, 1000, "out of range for int8"),      # binary_op_type_checking_impl
    ("+", tl.uint8, tl.int32, None, -1, "unsigned"),                   # negative scalar, unsigned block
    ("//", tl.float32, tl.float32, None, None, "takes integers"),       # floordiv: integers only
    ("<<", tl.float32, tl.int32, None, None, "takes integers"),         # bitwise_op_type_checking_impl
    ("%", tl.int32, tl.uint32, None, None, "signedness"),               # mod/computation_type_impl 6)
    ("+", tl.pointer_type(tl.float32), tl.float32, None, None, "pointer"),  # check_ptr_type_impl: T* + float
    ("-", tl.int32, tl.pointer_type(tl.float32), None, None, "pointer"),    # sub: int - ptr
    ("*", tl.pointer_type(tl.float32), tl.int32, None, None, "invalid operands"),
])
def test_bad_binary_operations_are_refused(op, a, b, a_scalar, b_scalar, match):
    with pytest.raises(Diagnostic, match=match):
        sem.binary(op, a, b, a_scalar, b_scalar)


def test_pointer_arithmetic_keeps_the_pointer():
    p = tl.pointer_type(tl.float16)
    assert sem.binary("+", p, tl.int32) == sem.Binary(None, p)
    assert sem.binary("+", tl.int64, p).result == p and sem.binary("-", p, tl.int32).result == p


def test_integer_division_is_cs_and_shifts_follow_the_sign():
    # floordiv: create_sdiv, mod: create_srem (truncation); core.py tensor.__rshift__: ashr if signed
    assert sem.INTEGER_DIVISION == "truncate"
    assert sem.shift_right_kind(tl.int32) == "arithmetic" and sem.shift_right_kind(tl.uint32) == "logical"


# --- math, reductions, shapes --------------------------------------------------------------------------

def test_math_takes_fp32_and_fp64_only():
    # math.py: @_check_dtype(dtypes=["fp32", "fp64"]) on exp, log, sqrt, ...
    assert sem.math("exp", tl.float32) == tl.float32 and sem.math("abs", tl.int8) == tl.int8
    for dtype in (tl.float16, tl.bfloat16, tl.int32):
        with pytest.raises(Diagnostic, match=r"tl.exp takes fp32 or fp64, not"):
            sem.math("exp", dtype)
    with pytest.raises(Diagnostic, match="fp32"):
        sem.math("sqrt_rn", tl.float64)


@pytest.mark.parametrize("dtype, expected", [
    (tl.int8, tl.int32), (tl.int16, tl.int32), (tl.uint16, tl.uint32), (tl.int1, tl.uint32),
    (tl.int64, tl.int64), (tl.float16, tl.float16), (tl.float32, tl.float32),
])
def test_sum_dtype(dtype, expected):
    # standard.py _pick_sum_dtype
    assert sem.sum_dtype(dtype) == expected
    assert sem.sum_dtype(dtype, tl.float64) == tl.float64


def test_max_min_dtype():
    # standard.py max/min: bf16 -> fp32 always; narrower than 32 bits widened when no indices are asked
    assert sem.max_min_dtype(tl.float16) == tl.float32 and sem.max_min_dtype(tl.int8) == tl.int32
    assert sem.max_min_dtype(tl.float16, return_indices=True) == tl.float16
    assert sem.max_min_dtype(tl.bfloat16, return_indices=True) == tl.float32
    assert sem.INDEX_DTYPE == tl.int32


def test_reduce_and_broadcast_shapes():
    assert sem.reduce_shape((4, 8), 0) == (8,) and sem.reduce_shape((4, 8), -1, keep_dims=True) == (4, 1)
    assert sem.reduce_shape((4, 8), None) == ()
    with pytest.raises(Diagnostic, match="out of range"):
        sem.reduce_shape((4,), 1)
    assert sem.broadcast_shapes((4, 1), (1, 8)) == (4, 8) and sem.broadcast_shapes((8,), (4, 1)) == (4, 8)
    with pytest.raises(Diagnostic, match="cannot broadcast"):
        sem.broadcast_shapes((4,), (8,))


def test_block_shapes_are_powers_of_two():
    # core.py validate_block_shape, semantic.py arange
    assert sem.block_shape([4, 8]) == (4, 8) and sem.arange(0, 16) == (16,)
    for bad, match in (([6], "powers of two"), ([2 ** 21], "more than"), ([1.5], "constexpr ints")):
        with pytest.raises(Diagnostic, match=match):
            sem.block_shape(bad)
    with pytest.raises(Diagnostic, match="power"):
        sem.arange(0, 10)
    with pytest.raises(Diagnostic, match="greater"):
        sem.arange(8, 8)


def test_dot_rules():
    # dot: one dtype, M/N/K >= 16, int8 -> int32, floats -> fp32 (fp16 with out_dtype=fp16)
    assert sem.dot(tl.float16, tl.float16, (32, 16), (16, 64)) == (tl.float32, (32, 64))
    assert sem.dot(tl.int8, tl.int8, (16, 16), (16, 16))[0] == tl.int32
    assert sem.dot(tl.float16, tl.float16, (16, 16), (16, 16), out_dtype=tl.float16)[0] == tl.float16
    assert sem.dot(tl.bfloat16, tl.bfloat16, (16, 16), (16, 16), tl.float32, (16, 16))[0] == tl.float32
    for args, match in (((tl.float16, tl.float32, (16, 16), (16, 16)), "one dtype"),
                        ((tl.float32, tl.float32, (16, 8), (8, 16)), "at least 16"),
                        ((tl.float32, tl.float32, (16, 16), (32, 16)), "cannot multiply"),
                        ((tl.float16, tl.float16, (16, 16), (16, 16), tl.float16, (16, 16)), "accumulator")):
        with pytest.raises(Diagnostic, match=match):
            sem.dot(*args)


def test_load_store_and_atomic_rules():
    p = tl.pointer_type(tl.float16)
    assert sem.load(p, (8,), (8,), True) == (tl.float16, (8,))
    assert sem.load(p, (8, 1), (1, 4), False) == (tl.float16, (8, 4))
    with pytest.raises(Diagnostic, match="needs a `mask`"):
        sem.load(p, (8,), None, True)
    with pytest.raises(Diagnostic, match="takes a pointer"):
        sem.load(tl.float32, (8,), None, False)
    assert sem.store(p, (8,), (), None) == tl.float16        # the implicit cast at a store
    with pytest.raises(Diagnostic, match="scalar"):
        sem.store(p, (), (8,), None)
    with pytest.raises(Diagnostic, match="does not support int8"):
        sem.atomic("add", tl.pointer_type(tl.int8), tl.int8)


def test_casts():
    assert sem.cast(tl.float32, tl.int1) == tl.int1
    with pytest.raises(Diagnostic, match="bitcast"):
        sem.cast(tl.float32, tl.float16, bitcast=True)
    with pytest.raises(Diagnostic, match="cannot cast"):
        sem.cast(tl.pointer_type(tl.float32), tl.float32)


@pytest.mark.parametrize("value, expected", [
    (True, tl.int1), (1, tl.int32), (2 ** 31 - 1, tl.int32), (2 ** 31, tl.int64), (-2 ** 31 - 1, tl.int64),
    (2 ** 63, tl.uint64), (0.1, tl.float32), (1e300, tl.float32),
])
def test_runtime_argument_types(value, expected):
    # runtime/jit.py mangle_type: i32, i64, u64 (from 2**63); every Python float is fp32
    assert sem.argument_dtype(value) == expected


def test_runtime_arguments_must_be_numbers():
    for bad, match in ((2 ** 64, "64 bits"), ("a", "a str cannot be passed"), (None, "NoneType")):
        with pytest.raises(Diagnostic, match=match):
            sem.argument_dtype(bad)
