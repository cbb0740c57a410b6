"""Indexing with torch's meaning in @jit code (codegen/pytorch/indexing.py): reads, writes, errors,
symbolic sizes, gradients; every result compared with plain torch and with the eager reference."""
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import babytriton as bt
from babytriton import CompilationError


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True)


def _check(f, expected, *args):
    for got in (f(*args), f.eager(*args)):
        for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else
                        (expected,)):
            _same(g, e)


# ----------------------------------------------------------------------------------------------
# reads
# ----------------------------------------------------------------------------------------------
@st.composite
def _indexed(draw):
    """A small tensor shape and an index of ints, slices with steps, None, ..., int lists that torch takes."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    items, axis, ellipsis = [], 0, False
    while axis < len(shape) and draw(st.booleans()):
        size = shape[axis]
        kind = draw(st.sampled_from(["int", "slice", "none", "list", "ellipsis"]))
        if kind == "int":
            items.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-size - 1, size + 1))
            items.append(slice(draw(bound), draw(bound), draw(st.one_of(st.none(), st.integers(1, 3)))))
        elif kind == "none":
            items.append(None)
            continue
        elif kind == "list":
            items.append(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=3)))
        elif not ellipsis:
            ellipsis = True
            items.append(Ellipsis)
            axis = len(shape)  # the rest is the ellipsis'
            continue
        axis += 1
    return tuple(shape), tuple(items)


@settings(max_examples=20, deadline=None)
@given(_indexed())
@example(((1, 1), ([0, 0], [0, 0, 0])))  # lists that don't broadcast (found by a CI run)
def test_generated_reads_match_torch(case):
    shape, index = case

    @bt.jit
    def f(x):
        return x[index]
    x = torch.randn(shape)
    try:
        expected = x[index]
    except IndexError as e:  # lists of lengths that don't broadcast: torch refuses, and so must we, at the line
        with pytest.raises(bt.CompilationError, match="could not be broadcast") as info:
            f(x)
        assert "shape mismatch" in str(e) and ":" in str(info.value).split("error:")[0]
        return
    _check(f, expected, x)


def test_reads_mixed():
    """Ints, negative ints, steps, None, ..., lists, int64/int32 index tensors, adjacent and separated advanced
    indices (torch's placement), bool scalars: one compiled function."""
    @bt.jit
    def f(x, i, j):
        return (x[0], x[-1, 1:3], x[:, ::2], x[None, ..., -1], x[..., [1, -1]], x[:, [-1]], x[i], x[:, i, :, j],
                x[i, :, j], x[0, i, :, j], x[1:, None, i], x[True], x[..., 1::3, i])
    x = torch.randn(3, 4, 5, 6)
    for dtype in (torch.int64, torch.int32):
        i, j = torch.tensor([[0, -1], [2, 1]], dtype=dtype), torch.tensor([1, -2], dtype=dtype)
        expected = (x[0], x[-1, 1:3], x[:, ::2], x[None, ..., -1], x[..., [1, -1]], x[:, [-1]], x[i], x[:, i, :, j],
                    x[i, :, j], x[0, i, :, j], x[1:, None, i], x[True], x[..., 1::3, i])
        _check(f, expected, x, i, j)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.bool])
def test_reads_keep_dtypes(dtype):
    @bt.jit
    def f(x):
        return x[1:, [0, 2]], x[-1]
    x = (torch.randn(3, 4) * 4).to(dtype)
    _check(f, (x[1:, [0, 2]], x[-1]), x)


def test_reads_nan_inf_and_empty():
    @bt.jit
    def f(x):
        return x[:, 1:], x[2:2], x[..., [0, 0]]
    x = torch.tensor([[float("nan"), float("inf")], [-float("inf"), 1.0]])
    _check(f, (x[:, 1:], x[2:2], x[..., [0, 0]]), x)


def test_symbolic_sizes():
    @bt.jit
    def f(x: bt.Tensor(("n", 8))):
        d = x.shape[-1]
        return x[:, 1:], x[-1], x[..., : d // 2], x[1:-1, ::3]
    for n in (3, 5):
        x = torch.randn(n, 8)
        _check(f, (x[:, 1:], x[-1], x[..., :4], x[1:-1, ::3]), x)

    @bt.jit
    def g(x: bt.Tensor(("n", "d")), i):
        d = x.shape[-1]
        y = x.clone()
        y[..., : d // 2] = 0
        y[-1] += 1
        return y, x[i]
    x, i = torch.randn(4, 6), torch.tensor([0, -1, 2])
    y = x.clone()
    y[..., :3] = 0
    y[-1] += 1
    _check(g, (y, x[i]), x, i)


def test_symbolic_setitem_scatter_and_mask():
    @bt.jit
    def g(x: bt.Tensor(("n", "d")), i, m):
        y = x.clone()
        y[i] = 5
        y[m] = -1.0
        y[:, [0, -1]] += 1
        y[1:, 1::2] = 0
        return y
    for n in (3, 6):
        x, i = torch.randn(n, 4), torch.tensor([0, -1])
        m = x > 1
        y = x.clone()
        y[i] = 5
        y[m] = -1.0
        y[:, [0, -1]] += 1
        y[1:, 1::2] = 0
        _check(g, y, x, i, m)


def _error(f, *args) -> str:
    with pytest.raises(CompilationError) as info:
        f(*args)
    message = str(info.value)
    assert "tvm" not in message.lower()
    return message


def test_bool_mask_read_is_a_located_error():
    @bt.jit
    def f(x):
        m = x > 0
        return x[m]
    message = _error(f, torch.randn(4))
    assert "torch.where" in message and "depends on the data" in message
    assert "test_pytorch_indexing.py:" in message and "return x[m]" in message and "^" in message


@pytest.mark.parametrize("index,words", [
    (slice(None, None, -1), "step must be greater than zero"),
    (5, "index 5 is out of bounds for dimension 0 with size 3"),
    ((slice(None), [7]), "index 7 is out of bounds for dimension 1 with size 4"),
    ((0, 0, 0), "too many indices for tensor of dimension 2"),
    ((Ellipsis, Ellipsis), "single ellipsis"),
])
def test_read_errors_in_torch_words(index, words):
    @bt.jit
    def f(x):
        return x[index]
    assert words in _error(f, torch.randn(3, 4))


def test_float_index_is_an_error():
    @bt.jit
    def f(x):
        return x[x]
    assert "must be long, int, byte or bool" in _error(f, torch.randn(3, 4))


def test_gradient_through_reads():
    @bt.jit
    def f(x, i):
        return (x[1:, ::2] * 2).sum() + x[i, -1].sum() + x[:, [0, 0]].sum()
    x, i = torch.randn(4, 5, requires_grad=True), torch.tensor([0, 0, 3])
    f(x, i).backward()
    ref = x.detach().clone().requires_grad_()
    ((ref[1:, ::2] * 2).sum() + ref[i, -1].sum() + ref[:, [0, 0]].sum()).backward()
    _same(x.grad, ref.grad)


# ----------------------------------------------------------------------------------------------
# writes: x[index] = value as a functional update
# ----------------------------------------------------------------------------------------------
def test_setitem_each_kind():
    @bt.jit
    def f(x, m, v):
        y = x.clone()
        y[:, 0] = 0                  # int on an axis: a number broadcast
        y[1:, ::2] += 5              # a strided slice, augmented
        y[..., -2:] = v              # a tensor value, broadcast over the rows
        y[m] = -1.0                  # a bool mask of x's shape: where
        w = x.clone()
        w[None, 1, 1:3] = 2.5        # None and an int
        w[...] = w * 2               # the whole tensor
        return y, w
    x = torch.randn(4, 6)
    m, v = x > 0.5, torch.tensor([10.0, 20.0])
    y = x.clone()
    y[:, 0] = 0
    y[1:, ::2] += 5
    y[..., -2:] = v
    y[m] = -1.0
    w = x.clone()
    w[None, 1, 1:3] = 2.5
    w[...] = w * 2
    _check(f, (y, w), x, m, v)


def test_setitem_mask_rows_and_scatter():
    @bt.jit
    def f(x, rows, i, v):
        z = x.clone()
        z[rows] = v
        z[i] = 7
        z[:, [0, -1]] = x[:, :2]
        return z
    x = torch.randn(4, 6)
    rows, i, v = x[:, 0] > 0, torch.tensor([-1, 1]), torch.arange(6.0)
    z = x.clone()
    z[rows] = v
    z[i] = 7
    z[:, [0, -1]] = x[:, :2]
    _check(f, z, x, rows, i, v)


def test_setitem_casts_and_refuses_bad_shapes():
    @bt.jit
    def f(x, v):
        y = x.clone()
        y[0] = v          # float values into an int tensor: truncated, as torch's copy_
        y[1, :2] = 2.7
        return y
    x, v = torch.zeros(3, 4, dtype=torch.int32), torch.tensor([1.5, -2.5, 3.9, 0.2])
    y = x.clone()
    y[0] = v
    y[1, :2] = 2.7
    _check(f, y, x, v)

    @bt.jit
    def g(x):
        y = x.clone()
        y[0] = torch.ones(2)
        return y
    assert "cannot be broadcast to indexing result of shape (4,)" in _error(g, torch.randn(3, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_setitem_half(dtype):
    @bt.jit
    def f(x):
        y = x.clone()
        y[:, 1::2] = y[:, 1::2] * 3
        y[0] = float("nan")
        return y
    x = torch.randn(3, 4).to(dtype)
    y = x.clone()
    y[:, 1::2] = y[:, 1::2] * 3
    y[0] = float("nan")
    _check(f, y, x)


def test_gradient_through_setitem():
    @bt.jit
    def f(x, w):
        y = x.clone()
        y[:, 0] = 0
        y[1:, 1::2] = w * 3
        return y
    x, w = torch.randn(3, 5, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    (f(x, w) * torch.arange(15.0).reshape(3, 5)).sum().backward()
    rx, rw = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = rx.clone()
    y[:, 0] = 0
    y[1:, 1::2] = rw * 3
    (y * torch.arange(15.0).reshape(3, 5)).sum().backward()
    _same(x.grad, rx.grad)
    _same(w.grad, rw.grad)
