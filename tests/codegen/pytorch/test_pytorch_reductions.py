"""torch's reductions, scans and sorts under @jit (babytriton/codegen/pytorch/reductions.py): each
function below is plain torch code, so torch running it is the oracle; compiled and eager
(`f.eager`) results must match it in value (NaN and ±inf rows included), dtype and shape."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-9, 1e-12), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (1.6e-2, 1e-2)}


def reductions(x):
    v, i = x.max(1)
    m = torch.min(x, dim=0, keepdim=True)
    return (torch.sum(x), x.sum(1), torch.sum(x, (0, 1), keepdim=True), x.mean(-1), torch.mean(x, dim=0, keepdim=True),
            x.prod(1), torch.nansum(x, 1), torch.amax(x, 1), x.amin((0, 1)), x.max(), v, i, m.values, m.indices,
            x.argmax(axis=1), torch.argmax(x), torch.argmax(x, 1, keepdim=True), torch.argmin(x, keepdim=True),
            torch.all(x), x.any(1), torch.count_nonzero(x, 0), torch.std(x, 1), x.var(0, unbiased=False),
            torch.var(x, dim=1, correction=0, keepdim=True), torch.std(x), torch.var(x, False),
            torch.std_mean(x, 1)[0], torch.var_mean(x, dim=0, correction=2)[1], torch.logsumexp(x, 1),
            x.logsumexp((0, 1)), torch.norm(x), x.norm(p=1, dim=1), torch.linalg.vector_norm(x, math.inf, 1),
            torch.linalg.vector_norm(x, -math.inf, 0), torch.norm(x, 3, 0), torch.norm(x, 0, 1, keepdim=True),
            torch.softmax(x, 1), F.softmax(x, dim=0), F.log_softmax(x, -1), x.softmax(-1), F.softmin(x, 1),
            x.log_softmax(dim=0, dtype=torch.float64), torch.cumsum(x, 1), x.cumprod(0), torch.topk(x, 2).values,
            torch.topk(x, 2, 0, largest=False).indices, torch.sort(x, 1).values,
            torch.sort(x, 0, descending=True).indices,
            torch.argsort(x, 1), x.argsort(0, descending=True))


def integer_reductions(x):
    return (torch.sum(x), x.sum(1), x.prod(1), torch.amax(x, 1), x.max(1).values, x.max(1).indices, torch.argmax(x),
            torch.all(x), x.any(1), torch.count_nonzero(x, 0), torch.cumsum(x, 1), torch.sort(x, 1).values,
            torch.sort(x, dim=1, stable=True).indices, torch.argsort(x, 0), torch.mean(x, 1, dtype=torch.float32),
            x.sum(dtype=torch.int32), torch.cumsum(x, 0, dtype=torch.float32))


def bool_reductions(x):
    return (torch.sum(x), x.sum(1), x.prod(1), torch.amax(x, 1), torch.all(x), x.any(1), torch.count_nonzero(x, 0),
            torch.cumsum(x, 1), torch.sort(x, 1).values, torch.argsort(x, dim=1, stable=True))


def relax_spelling(x):
    """Existing code's Relax spelling of tensor methods keeps Relax's meaning (values only)."""
    return (x.max(axis=1, keepdims=True), x.min(axis=0), x.sum(axis=1), x.mean(axis=-1, keepdims=True),
            x.argmax(axis=1), x.max(axis=[0, 1]), x.prod(axis=0))


REDUCTIONS, INTEGER, BOOL, RELAX = (bt.jit(f) for f in (reductions, integer_reductions, bool_reductions,
                                                        relax_spelling))


def same(got, want, rtol=None, atol=None):
    """Value, dtype and shape equal to torch's (floats within the dtype's tolerance, NaN where NaN)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if w.is_floating_point():
            r, a = TOLERANCE[w.dtype] if rtol is None else (rtol, atol)
            ok = torch.isclose(g.double(), w.double(), rtol=r, atol=a, equal_nan=True)
            assert ok.all(), (i, g[~ok][:5].tolist(), w[~ok][:5].tolist())
        else:
            assert torch.equal(g, w), (i, g, w)


def check(f, *args, want=None):
    """f compiled and f.eager against f run by torch (or `want`)."""
    want = f.__wrapped__(*args) if want is None else want
    same(f(*args), want)
    same(f.eager(*args), want)


def special_rows(dtype=torch.float32):
    """A NaN, a row of -inf, a +inf and a zero among distinct values (torch leaves tied indices open)."""
    k = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    x = (k + (k >= 16)).reshape(5, 6).float() / 8 - 2  # exact in bfloat16 too; no 0 but the one set below
    x[1, 2], x[3, 1], x[4, 4] = math.nan, math.inf, 0.0
    x[2] = -math.inf
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_float_reductions_match_torch(dtype):
    check(REDUCTIONS, special_rows(dtype))


def test_float_reductions_match_torch_on_finite_values():
    check(REDUCTIONS, torch.randperm(30).reshape(5, 6).float() / 3 - 5)


def test_integer_and_bool_reductions_match_torch():
    """int32 sums and products are int64, argmax int64, all/any bool, bools sort (as int32 inside)."""
    check(INTEGER, torch.tensor([[3, -1, 2, 0, 5, -4], [1, 1, -2, 2, 7, 0], [0, 0, 0, 1, -1, 2]], dtype=torch.int32))
    check(BOOL, torch.tensor([[True, False, True, False], [False, False, False, False], [True] * 4]))


def test_relax_spelling_keeps_relax_meaning():
    x = special_rows()
    want = (x.amax(1, keepdim=True), x.amin(0), x.sum(1), x.mean(-1, keepdim=True), x.argmax(1), x.amax(), x.prod(0))
    check(RELAX, x, want=want)


@bt.jit
def symbolic(x: bt.Tensor(("n", 8))):
    v = x.max(1)
    return (x.sum(0), torch.mean(x, 1), torch.std(x, 0), torch.var(x, 1, keepdim=True), torch.std(x),
            torch.logsumexp(x, 0), torch.softmax(x, 1), x.norm(dim=0), torch.cumsum(x, 1), v.values, v.indices,
            torch.sort(x, 1).values, torch.any(x > 0, 0), torch.count_nonzero(x, 1))


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 6), data=st.data())
def test_generated_inputs_with_symbolic_sizes(n, data):
    """One compiled function for every n over generated values, special ones mixed in."""
    values = st.one_of(st.floats(-50, 50, width=32), st.sampled_from([math.nan, math.inf, -math.inf, 0.0]))
    x = torch.tensor(data.draw(st.lists(values, min_size=8 * n, max_size=8 * n)), dtype=torch.float32).reshape(n, 8)
    x += torch.arange(8 * n).reshape(n, 8) * 1e-3  # no ties: torch leaves the index of equal values open
    check(symbolic, x)


def empty(x):
    return (torch.sum(x, 1), x.mean(1), x.prod(1), torch.all(x, 1), torch.any(x, 1), torch.count_nonzero(x, 1),
            torch.logsumexp(x, 1), torch.var(x, 1), torch.softmax(x, 1), torch.cumsum(x, 1), torch.norm(x, dim=1))


def test_empty_axes_give_torch_answers():
    check(bt.jit(empty), torch.empty(3, 0))


def losses(x):
    return (torch.softmax(x, 1) ** 2).sum() + torch.logsumexp(x, 1).sum() + torch.std(x, 0).sum() + \
        x.var(1, keepdim=True).mean() + F.log_softmax(x, 0).exp().pow(3).sum()


def test_gradients_match_torch():
    x = torch.randn(4, 5, dtype=torch.float64)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    bt.jit(losses)(a).backward()
    losses(b).backward()
    torch.testing.assert_close(a.grad, b.grad)


def bad_dim(x):
    return torch.sum(x, 3)


def bad_argument(x):
    return torch.norm(x, "nuc")


def integer_mean(x):
    return torch.mean(x.int(), 1)


def bad_k(x):
    return torch.topk(x, 9)


@pytest.mark.parametrize("fn, message", [
    (bad_dim, r"dim 3 is out of range for a 2-d tensor"), (bad_argument, "'nuc' are not supported"),
    (integer_mean, "must be a float tensor"), (bad_k, "k=9 is out of range"),
])
def test_errors_name_the_line_and_no_internals(fn, message):
    with pytest.raises(bt.CompilationError, match=message) as info:
        bt.jit(fn)(torch.ones(2, 3))
    text = str(info.value)
    assert f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno + 1}" in text and "tvm" not in text.lower()
    with pytest.raises(TypeError, match=message):
        bt.jit(fn).eager(torch.ones(2, 3))
