"""torch's scatter family under @jit (babytriton/codegen/pytorch/scatter.py): scatter, scatter_add,
scatter_reduce, index_add/copy/fill, index_put, masked_scatter, put, take, bincount, and their in-place
forms. Plain torch functions, so torch running them is the oracle (compiled and `f.eager`)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-9, 1e-12), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (1.6e-2, 1e-2)}


def same(got, want):
    got, want = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in (got, want))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if w.is_floating_point():
            ok = torch.isclose(g.double(), w.double(), *TOLERANCE[w.dtype], equal_nan=True)
            assert ok.all(), (i, g[~ok][:5].tolist(), w[~ok][:5].tolist())
        else:
            assert torch.equal(g, w), (i, g, w)


def check(f, *args):
    """f compiled and f.eager against f run by torch (fresh copies: in-place forms write their receiver)."""
    want = f.__wrapped__(*[a.clone() for a in args])
    same(f(*[a.clone() for a in args]), want)
    same(f.eager(*[a.clone() for a in args]), want)


@bt.jit
def scatters(x, index, src, rows, cols):
    """x (4, 5); index (3, 5) into dim 0 (unique per column for plain writes), src (3, 6); rows (3,)
    int64 indices of dim 0 with a repeat; cols (2,) of dim 1."""
    return (torch.scatter(x, 0, index, src), x.scatter(1, index[:, :4] % 5, 2.5),
            x.scatter(0, index, src, reduce="add"), x.scatter(0, index, src, reduce="multiply"),
            torch.scatter_add(x, 0, index, src), x.scatter_add(-2, index, src),
            torch.scatter_reduce(x, 0, index, src, "sum"),
            x.scatter_reduce(0, index, src, "prod", include_self=False), x.scatter_reduce(0, index, src, "mean"),
            x.scatter_reduce(0, index, src, "mean", include_self=False), x.scatter_reduce(0, index, src, "amax"),
            torch.scatter_reduce(x, 0, index, src, "amin", include_self=False),
            torch.index_add(x, 0, rows, src[:, :5]), x.index_add(1, cols, x[:, :2] * 2, alpha=-2),
            torch.index_copy(x, 1, cols, x[:, 3:] - 1), x.index_fill(0, rows, -1.0),
            torch.index_fill(x, 1, cols - 5, 7),
            torch.index_put(x, (rows[:2], cols[:1]), src[0, :2]), x.index_put((rows,), src[:3, :5], accumulate=True),
            x.masked_scatter(x > 0, src), x.put(cols, src[0, :2]), x.put(rows, src[0, :3], accumulate=True),
            torch.take(x, rows * 4 - 1), x.take(index))


def scatter_inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g).to(dtype)
    index = torch.stack([torch.randperm(4, generator=g)[:3] for _ in range(5)], 1)  # unique per column
    src = torch.randn(3, 6, generator=g).to(dtype)
    return x, index, src, torch.tensor([2, 0, 2]), torch.tensor([4, 1])


def test_scatter_family_matches_torch():
    """NaN and inf among the values: amax/amin propagate a NaN as torch does (TVM's max would drop it)."""
    x, index, src, rows, cols = scatter_inputs()
    src[0, 0], src[1, 2], x[1, 1] = math.nan, math.inf, math.nan
    check(scatters, x, index, src, rows, cols)


def test_scatter_family_in_halves_and_integers():
    check(scatters, *scatter_inputs(torch.float16))
    check(scatters, *scatter_inputs(torch.float64))


@bt.jit
def in_place(x, index, src, rows, cols):
    y = x.clone()
    y.scatter_(0, index, src)
    x.index_add_(0, rows, src[:, :5])
    x.scatter_add_(1, index[:, :4] % 5, src)
    x.index_fill_(1, cols, 0.5)
    x.scatter_reduce_(0, index, src, "amax", include_self=False)
    x.masked_scatter_(x < 0, src)
    x.index_copy_(0, rows[:2], src[:2, :5])
    return x, y


def test_in_place_forms_write_the_receiver():
    args = scatter_inputs()
    want_x = args[0].clone()
    want = in_place.__wrapped__(want_x, *args[1:])
    for run in (in_place, in_place.eager):
        x = args[0].clone()
        same(run(x, *args[1:]), want)
        same(x, want_x)


@bt.jit
def counted(values, weights):
    return torch.bincount(values, minlength=6), values.bincount(weights, minlength=6), \
        torch.bincount(values, weights.double(), 8)


def test_bincount_with_minlength_and_its_data_check():
    values = torch.tensor([0, 1, 1, 5, 3])
    check(counted, values, torch.rand(5))
    with pytest.raises(Exception, match="minlength=6"):  # the size would depend on the data
        counted(torch.tensor([0, 6]), torch.rand(2))


@bt.jit
def symbolic(x: bt.Tensor(("n", 4)), index: bt.Tensor(("k", 4), dtype="int64"), rows: bt.Tensor(("k",), dtype="int64"),
             src: bt.Tensor(("k", 4))):
    return (torch.scatter_add(x, 0, index, src), x.scatter(0, index, 1.5), torch.index_add(x, 0, rows, src),
            x.index_fill(0, rows, 0.0), x.scatter_reduce(0, index, src, "mean", include_self=False))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 5), k=st.integers(0, 6), data=st.data())
def test_generated_indices_with_symbolic_sizes(n, k, data):
    """Random indices (repeats included) into n rows; k = 0 writes nothing."""
    x = torch.tensor(data.draw(st.lists(st.floats(-10, 10, width=32), min_size=4 * n, max_size=4 * n))).reshape(n, 4)
    index = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=4 * k, max_size=4 * k)),
                         dtype=torch.int64).reshape(k, 4)
    rows = torch.tensor(data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)), dtype=torch.int64)
    src = torch.randn(k, 4)
    want = symbolic.__wrapped__(x, index, rows, src)
    got = symbolic(x, index, rows, src)
    same(got[:2] + got[3:], want[:2] + want[3:])  # index_add_ of float repeats: order of the sums differs
    torch.testing.assert_close(got[2], want[2])
    eager = symbolic.eager(x, index, rows, src)
    torch.testing.assert_close(eager, want)


def losses(x, src):
    index = torch.tensor([[0, 1, 2], [2, 0, 1]])
    rows = torch.tensor([1, 1, 0])
    return ((torch.scatter_add(x, 0, index, src[:2, :3]) ** 2).sum()
            + x.index_add(0, rows, src[:3, :3], alpha=3).sin().sum()
            + x.scatter(1, index, src[:2, :3]).exp().sum() + x.index_fill(1, rows[:1], 2.0).pow(2).sum()
            + x.masked_scatter(x > 0, src).cos().sum() + torch.take(x, rows).sum())


def test_gradients_match_torch():
    x = torch.randn(3, 3, dtype=torch.float64)
    src = torch.randn(3, 4, dtype=torch.float64)
    mine, theirs = [x.clone().requires_grad_(), src.clone().requires_grad_()], \
        [x.clone().requires_grad_(), src.clone().requires_grad_()]
    bt.jit(losses)(*mine).backward()
    losses(*theirs).backward()
    for m, t in zip(mine, theirs):
        torch.testing.assert_close(m.grad, t.grad)


def int32_index(x):
    return x.scatter(0, torch.zeros(2, 3, dtype=torch.int32), 1.0)


def bad_reduce(x):
    return x.scatter_reduce(0, torch.zeros(2, 3, dtype=torch.int64), x, "max")


def index_too_big(x):
    return x.scatter(1, torch.zeros(2, 4, dtype=torch.int64), x)


def mixed_source(x):
    return x.index_add(0, torch.tensor([0]), x[:1].double())


def no_minlength(x):
    return torch.bincount(x.long()[0])


def int_mask(x):
    return x.masked_scatter(x.int(), x)


@pytest.mark.parametrize("fn, message", [
    (int32_index, "int64 for index"), (bad_reduce, "sum, prod, mean, amax or amin"),
    (index_too_big, "to be smaller"), (mixed_source, "same scalar type"), (no_minlength, "pass minlength"),
    (int_mask, "boolean masks"),
])
def test_errors_name_the_line_and_no_internals(fn, message):
    x = torch.ones(2, 3)
    with pytest.raises(bt.CompilationError, match=message) as info:
        bt.jit(fn)(x)
    text = str(info.value)
    assert f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno + 1}" in text and "tvm" not in text.lower()
    with pytest.raises(TypeError, match=message):
        bt.jit(fn).eager(x)
