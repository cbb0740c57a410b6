"""torch's linear algebra (babytriton/codegen/pytorch/linalg.py) and the odd names of misc.py (conj, shifts,
pools, conv1d, F.pad) under @jit: plain torch functions, so torch running them is the oracle; compiled and
eager (`f.eager`) results must match it in value, dtype and shape, and gradients must match torch's."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-9, 1e-12), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (1.6e-2, 1e-2)}


def same(got, want, tol=None):
    """Value, dtype and shape equal to torch's (floats within the dtype's tolerance, NaN where NaN)."""
    got, want = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in (got, want))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if w.is_floating_point():
            r, a = tol or TOLERANCE[w.dtype]
            ok = torch.isclose(g.double(), w.double(), rtol=r, atol=a, equal_nan=True)
            assert ok.all(), (i, g[~ok][:5].tolist(), w[~ok][:5].tolist())
        else:
            assert torch.equal(g, w), (i, g, w)


def check(f, *args, tol=None):
    """f compiled and f.eager against f run by torch."""
    want = f.__wrapped__(*args)
    same(f(*args), want, tol)
    same(f.eager(*args), want, tol)


# ----------------------------------------------------------------------------------------------
# products
# ----------------------------------------------------------------------------------------------
@bt.jit
def products(a, b, v, w, c, d):
    """a (3, 4), b (4, 5), v (4,), w (5,), c (2, 3, 4), d (2, 4, 5)."""
    return (torch.matmul(a, b), a.matmul(b), torch.matmul(v, b), torch.matmul(a, v), torch.matmul(v, v),
            torch.matmul(c, b), torch.matmul(c, d), torch.matmul(v, d), torch.linalg.matmul(a, b), torch.mm(a, b),
            a.mm(b), torch.bmm(c, d), c.bmm(d), torch.mv(a, v), a.mv(v), torch.dot(v, v), v.dot(v), torch.vdot(v, v),
            torch.inner(a, a), torch.inner(v, v), torch.inner(c, a), torch.outer(v, w), v.outer(w), torch.ger(v, w),
            torch.addmm(a @ b, a, b), torch.addmm(w, a, b, beta=0.5, alpha=2), (a @ a.t()).addmm(a, a.t(), beta=0),
            torch.addmv(a[:, 0], a, v, alpha=-1), torch.addr(a @ b, a[:, 0], w, beta=2),
            torch.baddbmm(d[:, :3, :], c, d, alpha=0.5), torch.addbmm(b[:3], c, d), torch.kron(a, b),
            torch.kron(v, c), torch.trace(a), torch.trace(b.t()))


def test_products_match_torch():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    check(products, r(3, 4), r(4, 5), r(4), r(5), r(2, 3, 4), r(2, 4, 5), tol=(1e-5, 1e-4))


@bt.jit
def integer_products(a, b, v):
    return torch.matmul(a, b), torch.mv(a, v), torch.dot(v, v), torch.outer(v, v.float()), torch.trace(a), \
        torch.addmm(b[:3], a, b, beta=2, alpha=3), torch.kron(v, v)


def test_integer_products_match_torch():
    a, b = torch.randint(-5, 5, (3, 4), dtype=torch.int32), torch.randint(-5, 5, (4, 3), dtype=torch.int32)
    check(integer_products, a, b, torch.randint(-5, 5, (4,), dtype=torch.int32))


@bt.jit
def half_products(a, b, c, d):
    return torch.matmul(a, b), torch.bmm(c, d), torch.addmm(b[:3, :], a, b, beta=0.5, alpha=2), \
        torch.outer(a[0], b[:, 0]), torch.cdist(a, b.t())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_products_accumulate_in_float32(dtype):
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    a, b, c, d = r(3, 64), r(64, 3), r(2, 3, 64), r(2, 64, 3)
    want = (torch.matmul(a.float(), b.float()).to(dtype), torch.bmm(c.float(), d.float()).to(dtype),
            torch.addmm(b[:3].float(), a.float(), b.float(), beta=0.5, alpha=2).to(dtype),
            torch.outer(a[0], b[:, 0]), torch.cdist(a.float(), b.t().float()).to(dtype))
    same(half_products(a, b, c, d), want)
    same(half_products.eager(a, b, c, d), want)


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_generated_matmul_ranks_and_broadcasts(data):
    """torch.matmul's rules on generated ranks 1-4 with broadcast batch dims (size-1 dims included)."""
    k = data.draw(st.integers(1, 4))
    batch = data.draw(st.lists(st.integers(1, 3), max_size=2))
    other = [data.draw(st.sampled_from([n, 1])) for n in batch]
    left = batch + [data.draw(st.integers(1, 3))] if data.draw(st.booleans()) else []
    x = torch.randn(*(left + [k] if left else [k]))
    y = torch.randn(*(other + [k, 2] if data.draw(st.booleans()) else [k]))
    same(bt.jit(torch_matmul)(x, y), torch.matmul(x, y))


def torch_matmul(x, y):
    return torch.matmul(x, y)


# ----------------------------------------------------------------------------------------------
# cdist, diff, norms: generated and symbolic sizes
# ----------------------------------------------------------------------------------------------
@bt.jit
def distances(x: bt.Tensor(("n", 4)), y: bt.Tensor(("m", 4))):
    return (torch.cdist(x, y), torch.cdist(x, y, p=1), torch.cdist(x, y, p=math.inf), torch.cdist(x, y, 0),
            torch.cdist(x, y, p=3.0), torch.diff(x, dim=0), torch.diff(x), x.diff(n=2, dim=1),
            torch.diff(x, dim=0, prepend=y[:1], append=y), torch.matmul(x, y.t()),
            torch.linalg.matrix_norm(x), torch.linalg.matrix_norm(x, 1), torch.linalg.matrix_norm(x, -math.inf),
            torch.linalg.norm(x), torch.linalg.norm(x, "fro"), torch.linalg.norm(x, dim=1),
            torch.linalg.norm(x[0], 1), torch.linalg.matrix_norm(x, math.inf, keepdim=True))


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), m=st.integers(1, 5), data=st.data())
def test_generated_distances_with_symbolic_sizes(n, m, data):
    values = st.one_of(st.floats(-20, 20, width=32), st.sampled_from([0.0, 1.0]))
    x = torch.tensor(data.draw(st.lists(values, min_size=4 * n, max_size=4 * n)), dtype=torch.float32).reshape(n, 4)
    y = torch.tensor(data.draw(st.lists(values, min_size=4 * m, max_size=4 * m)), dtype=torch.float32).reshape(m, 4)
    check(distances, x, y, tol=(1e-4, 1e-4))


@bt.jit
def special_values(x, y, k):
    return torch.cdist(x, y), torch.diff(x), torch.diff(k), torch.diff(k > 0, dim=0), torch.diff(x, n=5), \
        torch.matmul(x, y.t())


def test_nan_inf_bool_and_empty():
    x = torch.tensor([[1.0, math.nan, 2.0], [math.inf, 0.0, -1.0]])
    y = torch.tensor([[1.0, 2.0, 3.0], [-math.inf, 0.0, 0.0], [0.0, 0.0, 0.0]])
    check(special_values, x, y, torch.tensor([[3, 1, 4], [1, 5, 9]], dtype=torch.uint8))
    check(special_values, torch.empty(0, 3), torch.empty(2, 3), torch.empty(0, 3, dtype=torch.int64))


def losses(a, b, v, w):
    return ((torch.matmul(a, b) ** 2).sum() + torch.outer(v, w).sin().sum() + torch.cdist(a, b.t()).sum()
            + torch.cdist(a, b.t(), p=1).sum() + torch.addmm(w, a, b, beta=0.5, alpha=2).exp().sum()
            + torch.diff(a, dim=0, append=a[:1]).pow(2).sum() + torch.kron(v, w).cos().sum()
            + torch.linalg.matrix_norm(a) + torch.cdist(a, a).sum() + torch.trace(a[:, :3]) * 2)


def test_gradients_match_torch():
    """Including cdist's at a distance of 0 (cdist(a, a)'s diagonal): 0, as torch's, not NaN."""
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(*s, generator=g, dtype=torch.float64) for s in ((3, 4), (4, 5), (4,), (5,))]
    mine, theirs = [t.clone().requires_grad_() for t in inputs], [t.clone().requires_grad_() for t in inputs]
    bt.jit(losses)(*mine).backward()
    losses(*theirs).backward()
    for m, t in zip(mine, theirs):
        torch.testing.assert_close(m.grad, t.grad)


# ----------------------------------------------------------------------------------------------
# misc.py: conj, shifts, pools, conv1d, pad
# ----------------------------------------------------------------------------------------------
@bt.jit
def shifts(x, s, u):
    return (x << 3, x >> 1, x << s, x >> s, torch.bitwise_left_shift(x, s), x.bitwise_right_shift(s),
            u << 4, u >> s.to(torch.uint8), x << 40, x >> 40, u << 9, x.conj(), torch.conj(x), x.resolve_conj(),
            torch.resolve_neg(x))


def test_shifts_follow_torch_for_every_count():
    """Counts < 0 or >= the bit width: 0, and a signed value's sign shifting right (C leaves them undefined)."""
    x = torch.tensor([5, -3, 1, 7, -128, 100], dtype=torch.int32)
    s = torch.tensor([-1, 8, 33, 31, 2, 0], dtype=torch.int32)
    check(shifts, x, s, torch.tensor([5, 200, 1, 7, 0, 255], dtype=torch.uint8))


@bt.jit
def pools(x, y):
    return (F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (2, None)), F.adaptive_max_pool2d(x, (2, 4)),
            F.adaptive_avg_pool1d(y, 2), F.adaptive_max_pool1d(y, 1), F.avg_pool1d(y, 3), F.max_pool1d(y, 2),
            F.avg_pool2d(x, 2), F.max_pool2d(x, (2, 4)), F.avg_pool1d(y, kernel_size=4, stride=4),
            F.pad(y, (1, 2)), F.pad(x, (0, 0, 1, 0), value=2.5), F.pad(x, (-1, 1, 2, -2)),
            F.pad(y, (2, 3), mode="reflect"), F.pad(y, (3, 1), mode="replicate"), F.pad(x, (1, 2, 2, 1), "circular"))


def test_pools_and_pads_match_torch():
    x = torch.randn(2, 3, 4, 8)
    x[0, 0, 0, 0] = math.nan
    check(pools, x, torch.randn(2, 3, 8))


@bt.jit
def convolutions(x, w, bias, dw, g):
    return (F.conv1d(x, w), F.conv1d(x, w, bias, stride=2, padding=1), torch.conv1d(x, w, None, 1, "same", 2),
            F.conv1d(x, dw, bias[:4], padding=3, groups=4), F.conv1d(x, g, None, 1, "valid", 1, 2),
            F.conv1d(x[0], w, bias))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_conv1d_matches_torch(dtype):
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    args = r(2, 4, 11), r(6, 4, 3), r(6), r(4, 1, 4), r(6, 2, 3)
    tol = (1e-5, 1e-4) if dtype == torch.float32 else None
    check(convolutions, *args, tol=tol)


def conv_loss(x, w, bias):
    return (F.silu(F.conv1d(x, w, bias, padding=3, groups=4)[..., :9]) ** 2).sum() + F.adaptive_avg_pool1d(x, 3).sum()


def test_conv1d_and_pool_gradients_match_torch():
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randn(*s, generator=g, dtype=torch.float64) for s in ((2, 4, 9), (4, 1, 4), (4,))]
    mine, theirs = [t.clone().requires_grad_() for t in inputs], [t.clone().requires_grad_() for t in inputs]
    bt.jit(conv_loss)(*mine).backward()
    conv_loss(*theirs).backward()
    for m, t in zip(mine, theirs):
        torch.testing.assert_close(m.grad, t.grad)


# ----------------------------------------------------------------------------------------------
# errors: located, in torch's words, no TVM
# ----------------------------------------------------------------------------------------------
def mm_of_3d(x):
    return torch.mm(x, x)


def matmul_sizes(x):
    return torch.matmul(x, x)


def matmul_0d(x):
    return torch.matmul(x.sum(), x)


def mixed_dtypes(x):
    return torch.matmul(x, x.t().double())


def cdist_of_ints(x):
    return torch.cdist(x.int(), x.int())


def nuclear_norm(x):
    return torch.linalg.matrix_norm(x, "nuc")


def negative_order(x):
    return torch.diff(x, n=-1)


def float_shift(x):
    return x << 2


def uneven_adaptive_pool(x):
    return F.adaptive_avg_pool1d(x, 2)


def padded_pool(x):
    return F.avg_pool1d(x, 2, padding=1)


def conv_channels(x):
    return F.conv1d(x, x[:, :2])


@pytest.mark.parametrize("fn, message", [
    (mm_of_3d, r"torch.mm\(\): expected 2-d and 2-d tensors"), (matmul_sizes, r"cannot be multiplied"),
    (matmul_0d, "at least 1D"), (mixed_dtypes, "same dtype"), (cdist_of_ints, "floating-point"),
    (nuclear_norm, "singular values"), (negative_order, "non-negative"), (float_shift, "integer tensors"),
    (uneven_adaptive_pool, "must divide"), (padded_pool, "padding is not supported"),
    (conv_channels, "expected input with"),
])
def test_errors_name_the_line_and_no_internals(fn, message):
    x = torch.ones(2, 3, 3) if fn is mm_of_3d else torch.ones(2, 3) if fn is not conv_channels else torch.ones(2, 3, 5)
    with pytest.raises(bt.CompilationError, match=message) as info:
        bt.jit(fn)(x)
    text = str(info.value)
    assert f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno + 1}" in text and "tvm" not in text.lower()
    with pytest.raises(NotImplementedError if fn is float_shift else TypeError):  # eager's `<<` is torch's
        bt.jit(fn).eager(x)
