"""torch's element-wise vocabulary under @jit (babytriton/codegen/pytorch/pointwise.py): each function
below is plain torch code, so running it with torch is the oracle; compiled and eager (`f.eager`)
results must match it in value (NaN, ±inf, signed zeros included) and dtype."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

SPECIAL = torch.tensor([0.0, -0.0, 1e-7, -1e-7, 1e-3, 0.5, 1.5, 2.5, -2.5, 0.9, -0.9, 1.0, 8.0, 100.0, -100.0, 3e38,
                        math.nan, math.inf, -math.inf, -1.0, 20.0, -20.0, 7.0, -3.0])
# Binary ops go without 3e38: its overflowing intermediates differ by evaluation order only (torch's
# addcmul is one FMA; torch's 3e38 % 1e-7 is NaN, its x / y overflowing: the `%` operator's rule).
MODERATE = SPECIAL[SPECIAL != 3e38]
TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-9, 1e-12), torch.float16: (2e-3, 1e-3),
             torch.bfloat16: (1.6e-2, 1e-2)}


def unary(x):
    return (torch.exp(x), torch.log(x), x.sqrt(), torch.rsqrt(x), torch.sin(x), torch.cos(x), x.tan(), torch.asin(x),
            torch.acos(x), torch.atan(x), torch.sinh(x), torch.cosh(x), torch.tanh(x), torch.asinh(x), x.acosh(),
            torch.atanh(x), torch.sigmoid(x), torch.special.expit(x), torch.erf(x), torch.abs(x), x.absolute(),
            torch.floor(x), torch.ceil(x), x.trunc(), torch.neg(x), -x.negative(), torch.sign(x), torch.square(x),
            torch.isnan(x), torch.isinf(x), x.isfinite(), torch.logical_not(x), torch.expm1(x), torch.special.log1p(x),
            torch.exp2(x), torch.log2(x), x.log10(), torch.reciprocal(x), torch.round(x), torch.nan_to_num(x),
            x.nan_to_num(nan=1.0, posinf=2.0), torch.deg2rad(x), torch.relu(x), x.positive())


def binary(x, y):
    return (torch.add(x, y, alpha=2), x.add(3), torch.sub(x, y), x.subtract(y, alpha=3), x.mul(y), torch.mul(x, 0.1),
            torch.div(x, y), x.div(y, rounding_mode="trunc"), torch.divide(x, y, rounding_mode="floor"),
            torch.true_divide(x, 3), torch.floor_divide(x, y), torch.remainder(x, y), x.fmod(y), torch.pow(x, 2),
            torch.pow(2, x), x.pow(y), torch.maximum(x, y), torch.minimum(x, y), torch.fmax(x, y), x.fmin(y),
            torch.eq(x, y), x.ne(y), x.lt(y), torch.le(x, y), torch.gt(x, 0), torch.greater_equal(x, y), x.less(y),
            torch.logical_and(x, y), torch.logical_or(x, y > 0), x.logical_xor(y), torch.clamp(x, min=y),
            torch.clamp(x, -1, 2), x.clip(max=0.5), x.clamp_min(y), torch.clamp_max(x, 1),
            torch.where(x > y, x, 0.5), torch.where(x < 0, 1, 2.0), x.masked_fill(x > y, 3))


def float_binary(x, y):
    return (torch.atan2(x, y), torch.logaddexp(x, y), torch.lerp(x, y, 0.3), x.lerp(y, 0.7), x.lerp(y, y),
            torch.addcmul(x, x, y, value=0.5), torch.addcdiv(x, x, y, value=2), torch.hypot(x, y), x.hypot(y * 1e30))


def integer_binary(x, y):
    return (x & y, torch.bitwise_and(x, y), x.bitwise_or(y), torch.bitwise_xor(x, y), torch.bitwise_not(x))


def activations(x):
    return (F.relu(x), F.relu(x, inplace=True), F.relu6(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x),
            F.mish(x), F.softplus(x), F.softplus(x, beta=2, threshold=5), F.elu(x), F.elu(x, alpha=0.5),
            F.selu(x), torch.selu(x), F.celu(x, alpha=2.0), F.leaky_relu(x, 0.2), F.leaky_relu(x), F.hardtanh(x),
            F.hardtanh(x, -0.5, 2.0), F.hardsigmoid(x), F.hardswish(x), F.logsigmoid(x), F.softsign(x),
            F.tanhshrink(x), F.sigmoid(x), F.tanh(x), x.relu(), x.sigmoid(), x.tanh())


def conversions(x):
    return (x.float(), x.half(), x.bfloat16(), x.double(), x.int(), x.long(), x.short(), x.bool(), x.byte(),
            x.char(), x.to(torch.float16), x.to("cpu"), x.to("cpu", torch.int64), x.to(dtype=torch.float64), x.to(x),
            x.to(x.device, torch.float64),
            x.type(torch.int32), x.type_as(x.int()), x.clone(), x.detach(), (x > 0).float(), (x > 0).to(torch.float16))


UNARY, BINARY, FLOAT_BINARY, INTEGER_BINARY, ACTIVATIONS, CONVERSIONS = (
    bt.jit(f) for f in (unary, binary, float_binary, integer_binary, activations, conversions))


def same(got, want, rtol=None, atol=None):
    """Value and dtype equal to torch's (floats within the dtype's tolerance, NaN where NaN)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if w.is_floating_point():
            r, a = TOLERANCE[w.dtype] if rtol is None else (rtol, atol)
            ok = torch.isclose(g.double(), w.double(), rtol=r, atol=a, equal_nan=True)
            assert ok.all(), (i, g[~ok][:5].tolist(), w[~ok][:5].tolist())
        else:
            assert torch.equal(g, w), (i, g, w)


def _either(got, want, wide):
    """torch's result, or where `got` equals the same call's float64 result (rounded to got's dtype)
    instead, that one: torch's vectorised float32 gelu gives NaN for +inf and inf for 3e38 on some CPUs
    (AVX-512), and the values themselves on others and in its scalar loop."""
    if not isinstance(want, torch.Tensor) or not want.is_floating_point() or want.dtype == torch.float64:
        return want
    wide = wide.to(want.dtype)
    return torch.where(torch.isclose(got.to(want.dtype), wide, equal_nan=True), wide, want)


def check(f, *args, rtol=None, atol=None):
    """f compiled and f.eager against f run by torch (or by torch in float64, where that is what they give)."""
    want = f.__wrapped__(*(a.clone() for a in args))
    wide = f.__wrapped__(*(a.double() if a.is_floating_point() else a.clone() for a in args))
    for got in (f(*args), f.eager(*args)):
        if isinstance(want, tuple):
            expected = tuple(_either(g, w, d) for g, w, d in zip(got, want, wide))
        else:
            expected = _either(got, want, wide)
        same(got, expected, rtol, atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.bool])
def test_unary_math_matches_torch(dtype):
    """Special values (NaN, ±inf, ±0, tiny, huge) in each dtype; integers and bools become float32 for
    float math, keep their dtype for abs/floor/sign/..., as torch says."""
    x = SPECIAL.to(dtype) if dtype.is_floating_point else torch.tensor([0, 1, -3, 7, 2, -1], dtype=dtype)
    if dtype == torch.bool:
        x = torch.tensor([True, False, True])
        with pytest.raises(bt.CompilationError, match="does not take bool tensors"):
            UNARY(x)
        return
    check(UNARY, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_binary_matches_torch(dtype):
    """Every pair of special values (or of small signed ints, zero divisors excluded where torch traps)."""
    if dtype.is_floating_point:
        x, y = MODERATE.repeat(len(MODERATE)).to(dtype), MODERATE.repeat_interleave(len(MODERATE)).to(dtype)
    else:
        v = torch.tensor([0, 1, -1, 7, -7, 3, -3, 5])
        x, y = v.repeat(8).to(dtype), torch.tensor([1, 2, -2, 3, -3, 7, -7, 4]).repeat_interleave(8).to(dtype)
    if dtype == torch.int32:
        x = x.clamp(min=1)  # 0 ** negative is the `**` operator's rule (see the report), not this table's
    check(BINARY, x, y)


def test_float_binary_matches_torch():
    x, y = MODERATE.repeat(len(MODERATE)), MODERATE.repeat_interleave(len(MODERATE))
    check(FLOAT_BINARY, x, y)
    check(FLOAT_BINARY, x.half(), y.half())


def test_integer_binary_matches_torch():
    check(INTEGER_BINARY, torch.arange(-8, 8, dtype=torch.int32), torch.arange(16, dtype=torch.int32).flip(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_activations_match_torch(dtype):
    check(ACTIVATIONS, SPECIAL.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_conversions_match_torch(dtype):
    """Floats to integers truncate toward zero, a bool mask becomes 0/1 floats (finite values only: a
    NaN or inf cast to an integer is whatever the hardware gives, README)."""
    check(CONVERSIONS, torch.tensor([-2.7, -0.5, 0.0, 0.5, 1.5, 3.9, 100.25, -100.75]).to(dtype))


@bt.jit
def symbolic(x: bt.Tensor(("n", 8)), y: bt.Tensor(("n", 8))):
    return (torch.add(x, y, alpha=0.5), torch.div(x, y, rounding_mode="floor"), torch.clamp(x, min=y, max=y + 1),
            F.gelu(x), F.mish(x), torch.expm1(x), torch.log1p(x), torch.where(x > y, x, y), x.half().float())


@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 5), data=st.data())
def test_generated_inputs_with_symbolic_sizes(n, data):
    """One compiled function for every n (0 included) over generated values, special ones mixed in."""
    values = st.one_of(st.floats(-50, 50, width=32), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0]))
    x, y = (torch.tensor(data.draw(st.lists(values, min_size=8 * n, max_size=8 * n)), dtype=torch.float32).reshape(n, 8)
            for _ in range(2))
    check(symbolic, x, y)


def grads(x):
    # (torch.logaddexp's backward trips TVM's FuseTIR: see the report)
    return F.gelu(x).sum() + F.mish(x).sum() + (F.softplus(x) * F.elu(x)).sum() + torch.lerp(x, x * x, x).sum()


GRADS = bt.jit(grads)


def test_gradients_match_torch():
    x = torch.randn(4, 5, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    GRADS(a).backward()
    grads(b).backward()
    torch.testing.assert_close(a.grad, b.grad)


def log1p_of(x):
    return torch.log1p(x)


def expm1_of(x):
    return torch.expm1(x)


def softplus_of(x):
    return F.softplus(x, beta=2.0)


@pytest.mark.parametrize("fn, x", [
    (log1p_of, [1e-9, -1e-9, 0.0, 3e-8, 1e-3, 2.0, -0.5, 1e30]),
    (expm1_of, [1e-9, -1e-9, 0.0, 3e-8, 1e-3, 2.0, -0.5, -9.0, -20.0, -200.0]),
    (softplus_of, [1e-9, 0.0, -8.5, -9.0, -20.0, -200.0, 2.0, 30.0])])
def test_gradients_where_the_formulas_other_branch_divides_zero_by_zero(fn, x):
    """log1p and expm1 are formulas with a branch for |x| below 1's ulp (1 + x, or exp(x), rounds to 1);
    the other branch's 0 / 0 there must not reach the gradient as NaN (softplus of x < -8.5, beta 2)."""
    x = torch.tensor(x)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    bt.jit(fn)(a).sum().backward()
    fn(b).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def bad_round(x):
    return torch.round(x, decimals=2)


def bad_device(x):
    return x.to("cuda")


def bad_dtype(x):
    return torch.exp(x) + F.gelu(x.int())


@pytest.mark.parametrize("fn, message", [
    (bad_round, "decimals=2"), (bad_device, "cannot move a tensor on cpu"), (bad_dtype, "takes a float tensor"),
])
def test_errors_name_the_line_and_no_internals(fn, message):
    with pytest.raises(bt.CompilationError, match=message) as info:
        bt.jit(fn)(torch.ones(3))
    text = str(info.value)
    assert f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno + 1}" in text and "tvm" not in text.lower()
    with pytest.raises(TypeError, match=message):
        bt.jit(fn).eager(torch.ones(3))


def sin_of_literal(x, n: int):
    return torch.sin(2) + x


def sin_of_parameter(x, n: int):
    return torch.sin(n) + x


def sin_of_computed(x, n: int):
    m = n if x.max() > 0 else n + 1   # a Python int in torch; a run-time number here
    return torch.sin(m) + x


@pytest.mark.parametrize("fn", [sin_of_literal, sin_of_parameter, sin_of_computed])
def test_a_torch_function_refuses_python_numbers_as_torch_does(fn):
    """torch.sin(3) is a TypeError in torch, also when the number is a parameter or computed from one."""
    x = torch.ones(3)
    with pytest.raises(TypeError):
        fn(x, 3)
    with pytest.raises(bt.CompilationError, match=r"torch.sin\(\) takes a tensor") as info:
        bt.jit(fn)(x, 3)
    assert "tvm" not in str(info.value).lower()


def sin_of_tensor(x, n: int):
    return torch.sin(torch.tensor(n)) + x


def test_a_number_made_a_tensor_is_taken():
    x = torch.ones(3)
    torch.testing.assert_close(bt.jit(sin_of_tensor)(x, 3), sin_of_tensor(x, 3))
