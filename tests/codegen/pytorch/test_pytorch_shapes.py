"""torch's shape ops and einsum under @jit (babytriton/codegen/pytorch/shapes.py): compiled and eager
results against plain torch on the same inputs (symbolic sizes, empty dims, half dtypes, NaN/inf),
generated dims and einsum equations, gradients, and the errors."""
import re

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton import CompilationError

N6 = bt.Tensor(("n", 6))


def views(x):
    n = x.shape[0]
    v = x.view(n, 2, 3)
    return (v, x.reshape(-1), x.view(-1, 3).reshape(n, 6), torch.reshape(x, (n, 3, 2)), x.reshape(shape=(n, 6)),
            x.view_as(v.transpose(1, 2)), v.reshape_as(x), x.contiguous(), x.flatten(), torch.flatten(v, 1),
            v.flatten(0, 1), x.unflatten(1, (2, -1)), torch.unflatten(x, -1, (3, 2)), x.unsqueeze(0), x.unsqueeze(-1),
            torch.unsqueeze(x, 1).squeeze(1), x.view(n, 1, 6, 1).squeeze((1, 3)), x.view(n, 1, 6).squeeze(-2),
            x.squeeze(1), v.permute(2, 0, 1), torch.permute(v, (1, -1, 0)), x.transpose(0, 1), x.t(), torch.t(x),
            torch.swapaxes(x, 0, -1), x.swapdims(1, 0), v.mT, x.T, v.movedim(0, -1), torch.moveaxis(v, (0, 1), (2, 0)),
            torch.movedim(v, -1, 0))


def broadcasts(x, r):
    n = x.shape[0]
    return (r.expand(4, 6), r.expand(3, -1, -1), x.expand(2, -1, -1), x.expand(2, n, 6), torch.broadcast_to(r, (n, 6)),
            r.expand_as(x), x.repeat(2, 1), x.repeat(1, 2, 3), torch.tile(x, (2,)), x.tile(2, 1, 1), x.repeat(0, 1),
            x.repeat_interleave(2, dim=1), torch.repeat_interleave(x, 3, 0), x.repeat_interleave(2))


def pieces(x):
    a, b = x.chunk(2, 1)
    c = torch.chunk(x, 4, dim=-1)
    d = x.split(4, 1)
    e = torch.split(x, [1, 2, 3], dim=1)
    f = x.tensor_split(4, 1)
    g = torch.tensor_split(x, [1, -2], dim=1)
    h = x.unbind(1)
    return (a, b, c[0], c[1], c[2], d[0], d[1], e[0], e[1], e[2], f[0], f[3], g[0], g[1], g[2], h[0], h[5],
            x.select(1, -1), torch.select(x, 1, 2), x.narrow(1, 2, 3), torch.narrow(x, -1, -4, 2), x.narrow(1, 6, 0),
            x.chunk(7, 1)[5], x.split(6, 1)[0])


def joins(x, y, i, e):
    """y is x's shape; i an int32 tensor of x's shape; e a float (0,) tensor (skipped by cat)."""
    return (torch.cat([x, y]), torch.cat((x, y), dim=1), torch.cat([x, e, y], -1), torch.concat([x, i], 0),
            torch.concatenate((i, x), axis=1), torch.cat([i, i]), torch.stack([x, y]), torch.stack((x, i), 1),
            torch.stack([x, y], dim=-1), torch.hstack([x, y]), torch.vstack([x, y, i]), torch.hstack([e, e]),
            torch.cat([e, e]))


def reorders(x):
    return (x.flip(0), torch.flip(x, (0, 1)), x.flip(-1), torch.tril(x), x.triu(1), torch.tril(x, -1),
            torch.triu(x.view(x.shape[0], 2, 3), -1))


def static_only(x, idx, col):
    """x (4, 6): ops that need static sizes; idx (4, 3) int64 in [0, 6); col (5,) int64 in [0, 4)."""
    return (torch.roll(x, 2, 1), x.roll((1, -1), (1, 0)), torch.roll(x, 3), x.roll(-7, -1), x.squeeze(),
            x.view(4, 1, 6, 1).squeeze(), torch.diagonal(x), x.diagonal(1), x.diagonal(-2), x.diagonal(9),
            torch.diagonal(x.view(2, 2, 6), 0, -1, 0), x.gather(1, idx), torch.gather(x, 1, idx[:, :2]),
            torch.take_along_dim(x, idx, 1), torch.take_along_dim(x, idx), torch.take_along_dim(x, idx[:1], dim=1),
            x.index_select(0, col), torch.index_select(x, 1, idx[0]), x.index_select(1, idx[0, 0]))


COMPILED = {fn: bt.jit(fn) for fn in (views, broadcasts, pieces, joins, reorders, static_only)}
VIEWS, BROADCASTS, PIECES, JOINS, REORDERS = (COMPILED[fn] for fn in (views, broadcasts, pieces, joins, reorders))


# The same rules over a symbolic n (inlined into these, whose parameters have symbolic sizes).
@bt.jit
def views_n(x: N6):
    return VIEWS(x)


@bt.jit
def broadcasts_n(x: N6, r):
    return BROADCASTS(x, r)


@bt.jit
def pieces_n(x: N6):
    return PIECES(x)


@bt.jit
def joins_n(x: N6, y: N6, i: bt.Tensor(("n", 6), "int32"), e):
    return JOINS(x, y, i, e)


@bt.jit
def reorders_n(x: N6):
    return REORDERS(x)


SYMBOLIC = {views: views_n, broadcasts: broadcasts_n, pieces: pieces_n, joins: joins_n, reorders: reorders_n}


def same(fn, *args, tol=0.0, symbolic=False):
    """Compiled and eager results equal plain torch's: values (NaN where torch has NaN), shapes, dtypes."""
    want = fn(*args)
    jitted = SYMBOLIC[fn] if symbolic else COMPILED[fn]
    for got in (jitted(*args), jitted.eager(*args)):
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
            torch.testing.assert_close(g, w, atol=tol, rtol=tol, equal_nan=True, msg=lambda m: f"output {k}: {m}")


def special(shape, dtype=torch.float32, seed=0):
    """Random values with NaN, inf and -inf among them."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    flat = x.view(-1)
    for value, at in zip((float("nan"), float("inf"), float("-inf")), (1, 4, 7)):
        if flat.numel() > at:
            flat[at] = value
    return x


@pytest.mark.parametrize("n", [3, 1, 0])
def test_symbolic_sizes_match_torch(n):
    x, y = special((n, 6)), special((n, 6), seed=2)
    same(views, x, symbolic=True)
    same(broadcasts, x, special((1, 6), seed=1), symbolic=True)
    same(reorders, x, symbolic=True)
    same(pieces, x, symbolic=True)
    same(joins, x, y, torch.arange(n * 6, dtype=torch.int32).view(n, 6), torch.zeros(0), symbolic=True)


@pytest.mark.parametrize("dtype, n", [(torch.float16, 2), (torch.bfloat16, 2), (torch.float16, 0)])
def test_static_sizes_and_half_dtypes_match_torch(dtype, n):
    x, y = special((n, 6), dtype), special((n, 6), dtype, seed=2)
    same(views, x)
    same(broadcasts, x, special((1, 6), dtype, 1))
    same(reorders, x)
    same(pieces, x)
    same(joins, x, y, torch.arange(n * 6, dtype=torch.int32).view(n, 6), torch.zeros(0))


def test_static_only_ops_match_torch():
    g = torch.Generator().manual_seed(0)
    same(static_only, special((4, 6)), torch.randint(0, 6, (4, 3), generator=g), torch.randint(0, 4, (5,), generator=g))


@bt.jit
def permute_by(x, order: bt.constexpr, src: bt.constexpr, dst: bt.constexpr, d: bt.constexpr):
    """Dims from the caller (generated): every dim rule on one tensor."""
    return (x.permute(order), x.movedim(src, dst), x.transpose(d, 0), x.unsqueeze(d), x.flip(d),
            torch.cat([x, x], d), torch.stack([x, x], d), x.chunk(2, d)[0], x.flatten(d), torch.split(x, 1, d)[-1],
            x.narrow(d, 0, 1), x.select(d, -1), x.sum(d))


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_generated_dims_match_torch(data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    rank = len(shape)
    dim = st.integers(-rank, rank - 1)
    order = tuple(data.draw(st.permutations(range(rank))))
    src = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    dst = data.draw(st.lists(st.integers(0, rank - 1), unique=True, min_size=len(src), max_size=len(src)))
    x = torch.randn(shape)
    args = (x, order, tuple(src), tuple(dst), data.draw(dim))
    want = permute_by.__wrapped__(*args)
    for got in (permute_by(*args), permute_by.eager(*args)):
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


@bt.jit
def expanded(x, sizes: bt.constexpr, reps: bt.constexpr):
    return x.expand(*sizes), x.repeat(reps), torch.tile(x, reps[1:]), x.reshape(-1, *x.shape[1:])


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_generated_expand_and_repeat_match_torch(data):
    shape = data.draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3))
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
    sizes = tuple(lead) + tuple(data.draw(st.sampled_from([-1, 4 if s == 1 else s])) for s in shape)
    reps = tuple(data.draw(st.lists(st.integers(0, 2), min_size=len(shape), max_size=len(shape) + 1)))
    x = torch.randn(shape)
    want = expanded.__wrapped__(x, sizes, reps)
    for got in (expanded(x, sizes, reps), expanded.eager(x, sizes, reps)):
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=0, atol=0)


# -- einsum ----------------------------------------------------------------------------------------
@bt.jit
def einsum1(eq: bt.constexpr, a):
    return torch.einsum(eq, a)


@bt.jit
def einsum2(eq: bt.constexpr, a, b):
    return torch.einsum(eq, a, b)


@bt.jit
def einsum3(eq: bt.constexpr, a, b, c):
    return torch.einsum(eq, [a, b, c])


EINSUMS = {1: einsum1, 2: einsum2, 3: einsum3}


def check_einsum(eq, *ops, tol=1e-5):
    want = torch.einsum(eq, *ops)
    for got in (EINSUMS[len(ops)](eq, *ops), EINSUMS[len(ops)].eager(eq, *ops)):
        assert got.shape == want.shape and got.dtype == want.dtype, (eq, got.shape, want.shape)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]), ("ij", [(2, 3)]), ("i,j->ij", [(2,), (3,)]), ("i,i->", [(4,), (4,)]),
    ("ij,ij->ij", [(2, 1), (2, 3)]), ("ij,jk", [(2, 1), (3, 4)]), ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("b...,b...", [(2, 3), (2, 1)]), ("Ba,aB", [(2, 3), (3, 2)]), ("...->...", [(2, 3)]), ("...ij->ij", [(2, 3, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]), ("ab,cd,ef", [(2, 1), (3, 2), (1, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), (",->", [(), ()]), ("i,->i", [(3,), ()]),
    ("ij,jk->ik", [(2, 0), (0, 4)]), ("ij,jk->ik", [(0, 3), (3, 4)]),
])
def test_einsum_matches_torch(eq, shapes):
    g = torch.Generator().manual_seed(len(eq))
    check_einsum(eq, *[torch.randn(s, generator=g) for s in shapes])


def test_einsum_half_and_int_and_nan():
    a, b = special((3, 4)), torch.randn(4, 5)
    check_einsum("ij,jk->ik", a, b)
    check_einsum("ij,jk->ik", a.half(), b.half(), tol=2e-3)
    check_einsum("ij,jk->ik", a.bfloat16(), b.bfloat16(), tol=2e-2)
    ints = torch.arange(12, dtype=torch.int32).view(3, 4)
    check_einsum("ij,jk->ik", ints, ints.T.contiguous())
    check_einsum("ij->j", ints)


@st.composite
def equations(draw):
    """A random einsum: 1-3 operands over letters a-e (sizes 1-3, some broadcast as 1), implicit or explicit output."""
    letters = "abcde"
    size = {c: draw(st.integers(1, 3)) for c in letters}
    count = draw(st.integers(1, 3))
    terms = [draw(st.lists(st.sampled_from(letters), unique=True, max_size=3)) for _ in range(count)]
    ellipsis = draw(st.lists(st.integers(1, 2), max_size=2))
    use = [draw(st.booleans()) if ellipsis else False for _ in terms]
    shapes = [[*(ellipsis[len(ellipsis) - draw(st.integers(0, len(ellipsis))):] if u else []),
               *(size[c] if draw(st.integers(0, 4)) else 1 for c in t)] for t, u in zip(terms, use)]
    lhs = ",".join(("..." if u else "") + "".join(t) for t, u in zip(terms, use))
    if draw(st.booleans()):
        return lhs, shapes
    used = sorted({c for t in terms for c in t})
    out = draw(st.permutations(used)).copy()[:draw(st.integers(0, len(used)))] if used else []
    return lhs + "->" + ("..." if any(use) else "") + "".join(out), shapes


@settings(max_examples=15, deadline=None)
@given(equations(), st.integers(0, 99))
def test_generated_einsum_matches_torch(case, seed):
    eq, shapes = case
    g = torch.Generator().manual_seed(seed)
    check_einsum(eq, *[torch.randn(s, generator=g) for s in shapes])


# -- gradients ------------------------------------------------------------------------------------
@bt.jit
def differentiable(x, y, idx):
    """x (4, 6) and y (4, 6) require grad; idx (4, 3) int64."""
    a, b = x.chunk(2, 1)
    return (x.view(2, 12).transpose(0, 1) * 2, torch.cat([a, y], 1), b.expand(2, 4, 3), torch.stack([a, b]),
            x.gather(1, idx), torch.einsum("ij,kj->ik", x, y), x.permute(1, 0).flatten(), x.unsqueeze(0).squeeze(0),
            torch.roll(y, 1, 0), x.flip(1), x.repeat(2, 1), x.narrow(1, 1, 3), x.select(0, 2), torch.tril(y),
            x.diagonal(), x.index_select(1, idx[0]), torch.split(y, [2, 4], 1)[1], x.repeat_interleave(2, 0), x.mT,
            torch.take_along_dim(y, idx, 1), torch.hstack([x, y]), y.unbind(0)[1], x.tile(2), x.tensor_split(4, 1)[3],
            torch.einsum("ij,kj->kij", x, y[:1]), torch.einsum("...j,...j", x, y), x.unflatten(1, (3, 2)).movedim(2, 0),
            torch.broadcast_to(y[:, :1], (4, 6)), torch.cat([x.half(), y]))


def test_gradients_match_torch():
    g = torch.Generator().manual_seed(0)
    x0, y0 = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    idx = torch.randint(0, 6, (4, 3), generator=g)
    grads = []
    for fn in (differentiable, differentiable.__wrapped__):
        x, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
        outs = fn(x, y, idx)
        sum((o * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in outs).backward()
        grads.append((x.grad, y.grad))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# -- errors ---------------------------------------------------------------------------------------
def bad_view(x):
    return x.view(4, 2)


def bad_transpose(x):
    return x.transpose(0, 2)


def bad_expand(x):
    return x.expand(3, 3)


def bad_cat(x):
    return torch.cat([x, x.T], 1)


def bad_permute(x):
    return x.permute(0, 0)


def bad_split(x):
    return x.split([2, 2], 1)


def bad_gather(x):
    return x.gather(0, x)


def bad_einsum(x):
    return torch.einsum("ii->i", x)


def bad_einsum_sizes(x):
    return torch.einsum("ij,jk->ik", x, x)


def bad_narrow(x):
    return x.narrow(1, 2, 5)


def bad_squeeze(x: bt.Tensor(("n", 3))):
    return x.squeeze()


def bad_repeat(x):
    return x.repeat(2)


@pytest.mark.parametrize("fn, words", [
    (bad_view, "shape '[4, 2]' is invalid for input of size 6"),
    (bad_transpose, "dim 2 is out of range for a 2-d tensor"),
    (bad_expand, "The expanded size of the tensor (3) must match the existing size (2) at non-singleton dimension 0"),
    (bad_cat, "Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3"),
    (bad_permute, "permute(): duplicate dims are not allowed."),
    (bad_split, "split_with_sizes expects split_sizes to sum exactly to 3"),
    (bad_gather, "must be an integer tensor"),
    (bad_einsum, "subscript i appears more than once in the operand 'ii'"),
    (bad_einsum_sizes, "subscript j has size 2 for operand 1 which does not broadcast with previously seen size 3"),
    (bad_narrow, "start (2) + length (5) exceeds dimension size (3)."),
    (bad_squeeze, "symbolic size"),
    (bad_repeat, "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"),
])
def test_errors_are_located_in_torchs_words(fn, words):
    x = torch.randn(2, 3)
    with pytest.raises(CompilationError) as info:
        bt.jit(fn)(x)
    text = str(info.value)
    assert words in text and "tvm" not in text.lower()
    assert f"{__file__}:" in text or "test_pytorch_shapes.py:" in text
    if fn not in (bad_view, bad_squeeze):  # eager: the same rule's words (no symbolic sizes there; reshape is torch's)
        with pytest.raises(TypeError, match=re.escape(words)):
            bt.jit(fn).eager(x)


def rows(x):
    return x.narrow(0, 1, 2), x.select(0, -1), x.narrow(0, -2, 1), x.expand(x.shape[0], 6)


@bt.jit
def rows_n(x: N6, y: bt.Tensor(("m", 6))):
    return ROWS(x) + (x.expand(y.shape[0], 6),)


ROWS = bt.jit(rows)


def test_symbolic_size_conditions_are_checked_when_the_code_runs():
    x = torch.randn(3, 6)
    for g, w in zip(rows_n(x, x), rows(x) + (x,), strict=True):
        torch.testing.assert_close(g, w)
    with pytest.raises(RuntimeError, match=r"start \(1\) \+ length \(2\) exceeds dimension size"):
        rows_n(torch.ones(2, 6), x)
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(m\) must match the existing size"):
        rows_n(x, torch.ones(4, 6))
