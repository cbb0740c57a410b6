"""Every construct of straight-line @jit code, checked against the same Python run on torch."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

T23 = bt.Tensor((2, 3), "float32")


def rand(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-5, 6, shape, dtype=dtype)


def test_issue_example():
    @bt.jit(target="cpu")
    def f(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
        out = a + b
        out = out * a - 1.5
        return out

    a, b = rand(2, 3), rand(2, 3)
    torch.testing.assert_close(f(a, b), (a + b) * a - 1.5)


def test_pass_body_returns_none():
    @bt.jit
    def nothing():
        """A docstring and a pass, as in the tutorial."""
        pass

    assert nothing() is None


def test_one_plus_one():
    @bt.jit
    def two():
        return 1 + 1

    out = two()
    assert out.dtype == torch.int64 and out.item() == 2


def test_tensor_add_and_add_add():
    @bt.jit
    def add(a: T23, b: T23):
        c = a + b
        return c + a

    a, b = rand(2, 3), rand(2, 3)
    torch.testing.assert_close(add(a, b), a + b + a)


def test_tuple_return_and_unpacking():
    @bt.jit
    def f(a: T23, b: T23):
        s, d = a + b, a - b
        p, (q, r) = s * d, (s, d)
        return p, q, r

    a, b = rand(2, 3), rand(2, 3)
    p, q, r = f(a, b)
    torch.testing.assert_close(p, (a + b) * (a - b))
    torch.testing.assert_close(q, a + b)
    torch.testing.assert_close(r, a - b)


def test_augmented_assignment():
    @bt.jit
    def f(a: T23, b: T23):
        x = a
        x += b
        x *= 2
        x -= a
        x /= 4.0
        return x

    a, b = rand(2, 3), rand(2, 3)
    torch.testing.assert_close(f(a, b), ((a + b) * 2 - a) / 4.0)


def test_annotated_assignment():
    @bt.jit
    def f(a: T23):
        y: bt.Tensor = a * 3
        return y

    a = rand(2, 3)
    torch.testing.assert_close(f(a), a * 3)


# One def per operator: @jit reads source, so no lambdas.
def op_add(a, b): return a + b
def op_sub(a, b): return a - b
def op_mul(a, b): return a * b
def op_div(a, b): return a / b
def op_floordiv(a, b): return a // b
def op_mod(a, b): return a % b
def op_pow(a, b): return a ** b
def op_and(a, b): return a & b
def op_or(a, b): return a | b
def op_xor(a, b): return a ^ b
def op_lt(a, b): return a < b
def op_le(a, b): return a <= b
def op_gt(a, b): return a > b
def op_ge(a, b): return a >= b
def op_eq(a, b): return a == b
def op_ne(a, b): return a != b


ARITH = {"+": op_add, "-": op_sub, "*": op_mul, "/": op_div, "//": op_floordiv, "%": op_mod, "**": op_pow}
BITWISE = {"&": op_and, "|": op_or, "^": op_xor}
COMPARE = {"<": op_lt, "<=": op_le, ">": op_gt, ">=": op_ge, "==": op_eq, "!=": op_ne}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
@pytest.mark.parametrize("op", list(ARITH))
def test_arithmetic_matches_torch(op, dtype):
    fn = ARITH[op]
    f = bt.jit(fn)
    a = rand(3, 4, dtype=dtype)
    b = rand(3, 4, dtype=dtype)
    if op in ("/", "//", "%"):
        b = torch.where(b == 0, torch.ones_like(b), b)
    if op == "**":
        a, b = (a.abs() + 1, b.abs() % 3) if not dtype.is_floating_point else (a.abs() + 0.5, b)
    expected = fn(a, b)
    got = f(a, b)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.int64])
@pytest.mark.parametrize("op", ["&", "|", "^"])
def test_bitwise_matches_torch(op, dtype):
    fn = BITWISE[op]
    a, b = rand(4, 5, dtype=dtype), rand(4, 5, dtype=dtype)
    got = bt.jit(fn)(a, b)
    assert got.dtype == dtype
    assert torch.equal(got, fn(a, b))


def test_unary_operators():
    @bt.jit
    def f(x: bt.Tensor((3, 4), "float32"), i: bt.Tensor((3, 4), "int32"), m: bt.Tensor((3, 4), "bool")):
        return -x, +x, ~i, ~m, not m

    x, i, m = rand(3, 4), rand(3, 4, dtype=torch.int32), rand(3, 4, dtype=torch.bool)
    neg, pos, inv, bnot, lnot = f(x, i, m)
    torch.testing.assert_close(neg, -x)
    torch.testing.assert_close(pos, x)
    assert torch.equal(inv, ~i) and torch.equal(bnot, ~m) and torch.equal(lnot, ~m)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons(op):
    fn = src_f = COMPARE[op]
    a = torch.randint(0, 3, (4, 4)).float()
    b = torch.randint(0, 3, (4, 4)).float()
    got = bt.jit(src_f)(a, b)
    assert got.dtype == torch.bool
    assert torch.equal(got, fn(a, b))


def test_chained_comparison_and_boolops():
    @bt.jit
    def f(x: bt.Tensor((8,), "float32"), lo: bt.Tensor((8,), "float32")):
        inside = lo < x <= 1.0
        either = (x > 0.5) or (x < -0.5)
        both = (x > 0) and inside
        return inside, either, both

    x, lo = rand(8), rand(8) - 1
    inside, either, both = f(x, lo)
    assert torch.equal(inside, (lo < x) & (x <= 1.0))
    assert torch.equal(either, (x > 0.5) | (x < -0.5))
    assert torch.equal(both, (x > 0) & (lo < x) & (x <= 1.0))


def test_matmul():
    @bt.jit
    def mm(a: bt.Tensor((4, 8), "float32"), b: bt.Tensor((8, 3), "float32")):
        return a @ b

    a, b = rand(4, 8), rand(8, 3)
    torch.testing.assert_close(mm(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_conditional_expression():
    @bt.jit
    def f(x: bt.Tensor((5,), "float32"), flip: bt.constexpr):
        y = -x if flip else x
        return (x > 0) if False else (y if x.ndim == 1 else x)

    x = rand(5)
    torch.testing.assert_close(f(x, True), -x)
    torch.testing.assert_close(f(x, False), x)

    @bt.jit
    def relu_like(x: bt.Tensor((5,), "float32")):
        return x if x > 0 else 0.0

    # a tensor condition selects element-wise
    torch.testing.assert_close(relu_like(x), torch.clamp(x, min=0))


# --------------------------------------------------------------------------------------------------
# dtypes: Python numbers take the tensor's dtype; tensors promote as in torch
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.int32, torch.int64])
def test_python_number_takes_tensor_dtype(dtype):
    f = bt.jit(lambda_free_scale)
    x = rand(2, 3, dtype=dtype)
    got = f(x)
    expected = x * 2 + 1
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected)


def lambda_free_scale(x):
    return x * 2 + 1


def test_python_float_with_int_tensor_promotes_like_torch():
    @bt.jit
    def f(x):
        return x * 0.5

    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    got = f(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x * 0.5)


DTYPE_PAIRS = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64,
               torch.bool]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(DTYPE_PAIRS), st.sampled_from(DTYPE_PAIRS),
       st.sampled_from(["+", "*", "-", "<"]))
def test_mixed_dtype_promotion(da, db, op):
    fn = {**ARITH, **COMPARE}[op]
    a, b = rand(2, 3, dtype=da), rand(2, 3, dtype=db)
    try:
        expected = fn(a, b)
    except RuntimeError:  # torch refuses e.g. bool - bool; so do we
        with pytest.raises(bt.CompilationError):
            bt.jit(fn)(a, b)
        return
    got = bt.jit(fn)(a, b)  # bool + bool and bool * bool are bool as in torch (or, and)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)


# --------------------------------------------------------------------------------------------------
# shapes: broadcasting, .shape / len as compile-time ints, symbolic dimensions
# --------------------------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_broadcasting_matches_torch(shape, data):
    other = [data.draw(st.sampled_from([1, d])) for d in shape][data.draw(st.integers(0, len(shape) - 1)):]

    @bt.jit
    def f(a, b):
        return a * b + a

    a, b = rand(*shape), rand(*other)
    torch.testing.assert_close(f(a, b), a * b + a)


def test_shape_and_len_are_compile_time_ints():
    @bt.jit
    def f(x: bt.Tensor((4, 6), "float32")):
        rows = x.shape[0]
        return x * (rows * len(x) + x.shape[-1] + x.ndim)

    x = rand(4, 6)
    torch.testing.assert_close(f(x), x * (4 * 4 + 6 + 2))


def test_symbolic_dimension_serves_every_size_with_one_compile():
    @bt.jit
    def f(a: bt.Tensor(("n", 3), "float32"), b: bt.Tensor(("n", 3), "float32")):
        return a * b - b

    for n in (1, 2, 5, 17):
        a, b = rand(n, 3), rand(n, 3)
        torch.testing.assert_close(f(a, b), a * b - b)
    assert f.cache_info()["compilations"] == 1
    assert "n" in f.compile(rand(2, 3), rand(2, 3)).stages["relax"]


def test_symbolic_dimension_must_agree_between_parameters():
    @bt.jit
    def f(a: bt.Tensor(("n", 3), "float32"), b: bt.Tensor(("n", 3), "float32")):
        return a + b

    with pytest.raises(ValueError, match=r"dimension 'n' is 2 in parameter 'a' but 4 in parameter 'b'"):
        f(rand(2, 3), rand(4, 3))


# --------------------------------------------------------------------------------------------------
# parameters: unannotated, runtime scalars, constexpr, globals
# --------------------------------------------------------------------------------------------------

def test_unannotated_parameters_specialise_per_shape_and_dtype():
    @bt.jit
    def f(a, b):
        return a - b * 2

    for shape, dtype in [((2, 3), torch.float32), ((4,), torch.float32), ((2, 3), torch.float64),
                         ((2, 3), torch.float32)]:
        a, b = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
        out = f(a, b)
        assert out.dtype == dtype
        torch.testing.assert_close(out, a - b * 2)
    assert f.cache_info()["compilations"] == 3


def test_runtime_scalars_do_not_recompile():
    @bt.jit
    def f(x: bt.Tensor((2, 3), "float32"), s: float, k: int, flag: bool):
        return x * s + k, flag

    x = rand(2, 3)
    for s, k, flag in [(0.5, 2, True), (-3.25, 7, False), (2, -1, True)]:
        y, fl = f(x, s, k, flag)
        torch.testing.assert_close(y, x * s + k)
        assert fl.dtype == torch.bool and bool(fl) is flag
    assert f.cache_info()["compilations"] == 1


def test_constexpr_folds_and_keys_the_cache():
    @bt.jit
    def f(x: bt.Tensor((2, 3), "float32"), scale: bt.constexpr):
        return x * scale

    x = rand(2, 3)
    torch.testing.assert_close(f(x, 3), x * 3)
    torch.testing.assert_close(f(x, 0.25), x * 0.25)
    torch.testing.assert_close(f(x, 3), x * 3)
    assert f.cache_info()["compilations"] == 2
    assert "0.25" in f.compile(x, 0.25).stages["relax"]


EPS = 1e-3


def test_global_numbers_are_compile_time_constants():
    @bt.jit
    def f(x):
        return x + EPS

    x = rand(3)
    torch.testing.assert_close(f(x), x + EPS)


def test_keyword_arguments_and_defaults():
    @bt.jit
    def f(x, y, k: bt.constexpr = 2):
        return x * k + y

    x, y = rand(3), rand(3)
    torch.testing.assert_close(f(y=y, x=x), x * 2 + y)
    torch.testing.assert_close(f(x, y, k=5), x * 5 + y)


# --------------------------------------------------------------------------------------------------
# arguments: numpy, bt.Tensor values, non-contiguous tensors
# --------------------------------------------------------------------------------------------------

def test_numpy_in_numpy_out():
    @bt.jit
    def f(a, b):
        return a + b, a * b

    a = np.random.rand(2, 3).astype("float32")
    b = np.random.rand(2, 3).astype("float32")
    s, p = f(a, b)
    assert isinstance(s, np.ndarray) and isinstance(p, np.ndarray)
    np.testing.assert_allclose(s, a + b, rtol=1e-6)
    np.testing.assert_allclose(p, a * b, rtol=1e-6)


def test_mixed_numpy_and_torch_gives_torch():
    @bt.jit
    def f(a, b):
        return a + b

    a = np.ones((2, 3), "float32")
    out = f(a, torch.ones(2, 3))
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.full((2, 3), 2.0))


def test_tensor_values_the_tutorial_way():
    @bt.jit
    def f(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
        return a + b

    a = bt.Tensor(shape=(2, 3), dtype="float32")
    b = bt.Tensor(shape=(2, 3), dtype="float32")
    a.data = torch.ones(2, 3)
    b.data = torch.full((2, 3), 2.0)
    torch.testing.assert_close(f(a, b), torch.full((2, 3), 3.0))


def test_non_contiguous_and_unaligned_arguments():
    @bt.jit
    def f(a, b):
        return a - b

    base = torch.randn(6, 4)
    a = base.t()                       # non-contiguous view
    b = torch.randn(25)[1:].reshape(4, 6)  # storage offset: not 64-byte aligned
    torch.testing.assert_close(f(a, b), a - b)


def test_results_are_fresh_tensors_sharing_no_input_memory():
    @bt.jit
    def f(a):
        return a * 1.0

    a = rand(2, 3)
    out = f(a)
    out.add_(1)
    assert not torch.equal(out, a)


# -- what TVM used to refuse, with torch's meaning ---------------------------------------------------
def _div_zero(x):
    return x / 0.0, x / -0.0, x // 0.0, x % 0.0, 1.0 / x, x / 0


def _neg_unsigned(u):
    return -u, u + (-1), u - 2, u < -1


def _wrapping_ints(x):
    return x + 2**40, x * (2**40 + 3), x + 2**31, x < 2**40, x == 2**32 + 1


def _where_int_bool(c, a, b):
    return bt.where(c, a, b), (a if c else b), bt.where(c, a, True)


@pytest.mark.parametrize("fn, args", [
    (_div_zero, (torch.tensor([1.0, 0.0, -1.0, float("nan"), float("inf"), -float("inf")]),)),
    (_div_zero, (torch.tensor([3, 0, -2], dtype=torch.int32),)),
    (_div_zero, (torch.tensor([1.5, 0.0, -2.0], dtype=torch.float16),)),
    (_neg_unsigned, (torch.tensor([0, 1, 200, 255], dtype=torch.uint8),)),
    (_wrapping_ints, (torch.tensor([1, 5, 2**20], dtype=torch.int32),)),  # the sums themselves in range
    (_wrapping_ints, (torch.tensor([1, -5, 9], dtype=torch.int8),)),
    (_where_int_bool, (torch.tensor([True, False, True]), torch.tensor([1, 2, 3], dtype=torch.int32),
                       torch.tensor([False, True, True]))),
])
def test_what_tvm_refused_computes_as_torch(fn, args):
    """Division by a zero constant (inf, nan), negating unsigned ints (wraps), integer constants
    beyond the tensor's dtype (wrap as torch converts them), ints meeting bools in `where`."""
    want = fn(*args) if fn is not _where_int_bool else (
        torch.where(*args), torch.where(*args), torch.where(args[0], args[1], True))
    f = bt.jit(fn)
    for run in (f, f.eager):
        got = run(*[a.clone() for a in args])
        for g, w in zip(got, want):
            assert g.dtype == w.dtype, (run, g, w)
            torch.testing.assert_close(g, w, equal_nan=True)


# -- numbers beyond a half dtype's range ----------------------------------------------------------------
def _overflowing_numbers(h):
    return h + 70000, h - 70000, 70000 - h, h * 70000, 70000 * h, h / 1e-6, 70000 / h, h + 1e39, h * -1e39, h / 1e39


def _with_scalar(h, s: float):
    return h + s, h - s, s - h, h * s, h / s, s / h


def _compiled_and_eager_without_warnings(fn, *args):
    """fn's results compiled and eager, asserting that neither compiling nor running warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = bt.jit(fn)
        results = (f(*args), f.eager(*args))
    assert not caught, [str(w.message) for w in caught]
    return results


# reciprocals exact in both half dtypes (bfloat16 kernels keep `1 / h` in float32 before `* 70000`)
HALF_VALUES = [1.0, -2.0, 0.0, -0.0, 0.5, 4.0, float("inf"), float("nan"), 65504.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_numbers_beyond_a_half_dtype_are_inf_without_a_warning(dtype):
    """A number past a half dtype's range meets the tensor as torch's value of it: `h + 70000` adds inf
    in float16 (numpy warned "overflow encountered in cast"), `h * 70000` computes in float32, and
    `70000 / h` is torch's reciprocal of h times 70000; no warning is raised."""
    h = torch.tensor(HALF_VALUES, dtype=dtype)
    want = _overflowing_numbers(h)
    for got in _compiled_and_eager_without_warnings(_overflowing_numbers, h):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("s", [70000.0, -1e39, 65519.99999, 3.4e38, 1 + 2**-11 + 2**-40])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_run_time_scalars_beyond_a_half_dtype_are_inf_as_in_torch(dtype, s):
    """A run-time `s: float` converts to the half dtype as torch converts it (through float32, so
    65519.99999 is inf in float16, not 65504), with no warning."""
    h = torch.tensor(HALF_VALUES, dtype=dtype)
    want = _with_scalar(h, s)
    for got in _compiled_and_eager_without_warnings(_with_scalar, h, s):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


def _overflowing_bounds(h):
    return maximum(h, 70000), where(h > 1, 70000.0, h)  # noqa: F821


def _clip_beyond_float16(h):
    return clip(h, -70000, 70000)  # noqa: F821


def test_library_numbers_beyond_float16():
    """The library's numbers: a promoted operand is inf as a number meeting the tensor is; clip's bounds
    are refused, as torch.clamp refuses them (TVM refused the float16 literal, a raw error)."""
    h = torch.tensor(HALF_VALUES, dtype=torch.float16)
    inf = torch.tensor(float("inf"), dtype=torch.float16)
    want = (torch.maximum(h, inf), torch.where(h > 1, inf, h))
    for got in _compiled_and_eager_without_warnings(_overflowing_bounds, h):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.clamp(h, -70000, 70000)
    with pytest.raises(bt.CompilationError, match=r"clip\(\): argument 'min' is -70000, beyond the largest float16") as info:
        bt.jit(_clip_beyond_float16)(h)
    assert info.value.lineno == _clip_beyond_float16.__code__.co_firstlineno + 1
    with pytest.raises(TypeError, match="beyond the largest float16"):
        bt.jit(_clip_beyond_float16).eager(h)
