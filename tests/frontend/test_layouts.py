"""Permuted and broadcast tensor arguments passed without a copy (babytriton/frontend/layouts.py): their
layout found from the strides, keyed on, passed as the storage view, and seen as the caller's view
inside; the results compared with torch."""
import shutil

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton.frontend.layouts import Layout, layout_of
from babytriton.runtime import kernel as kernel_module

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


@st.composite
def views(draw, max_rank=4):
    """(a contiguous tensor's shape, a permutation of it, axes of size 1 then expanded, their sizes)."""
    rank = draw(st.integers(1, max_rank))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    order = draw(st.permutations(range(rank)))
    ones = draw(st.sets(st.integers(0, rank - 1), max_size=rank))
    sizes = [draw(st.integers(2, 4)) for _ in ones]
    return shape, tuple(order), sorted(ones), sizes


def make(spec, dtype=torch.float32):
    """A tensor of contiguous memory seen through a permute, then an expand of some size-1 axes."""
    shape, order, ones, sizes = spec
    shape = [1 if axis in ones else n for axis, n in enumerate(shape)]
    if dtype.is_floating_point:
        base = torch.randn(shape).to(dtype)
    else:
        base = torch.randint(-50, 50, shape, dtype=dtype)
    view = base.permute(order)
    expanded = list(view.shape)
    for axis, size in zip(ones, sizes):
        expanded[order.index(axis)] = size
    return base, view.expand(expanded)


# --------------------------------------------------------------------------------------------------
# the layout of a tensor
# --------------------------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(views())
def test_a_permuted_or_broadcast_view_has_a_layout_whose_storage_is_its_memory(spec):
    base, t = make(spec)
    layout = layout_of(t)
    if t.is_contiguous():
        assert layout is None
        return
    assert layout is not None
    storage = layout.storage(t)
    assert storage.is_contiguous() and storage.data_ptr() == base.data_ptr()
    assert tuple(storage.shape) == layout.storage_shape(tuple(t.shape))
    back = storage.permute(layout.inverse).expand(t.shape)
    assert torch.equal(back, t)


@pytest.mark.parametrize("make_view", [
    lambda x: x[:, ::2], lambda x: x[1:, 1:].T, lambda x: x._neg_view().T, lambda x: x[:, :3].T,
    lambda x: torch.empty(0, 4).T, lambda x: x.contiguous(),
])
def test_gaps_negative_bits_empty_and_contiguous_tensors_have_no_layout(make_view):
    assert layout_of(make_view(torch.randn(6, 8))) is None


def test_channels_last_and_matrix_transposes_are_permutations():
    assert layout_of(torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)) == Layout((0, 2, 3, 1), ())
    assert layout_of(torch.randn(2, 3, 4).mT) == Layout((0, 2, 1), ())
    assert layout_of(torch.randn(3, 1).expand(3, 4)) == Layout((0, 1), (1,))


# --------------------------------------------------------------------------------------------------
# compiled functions called with them
# --------------------------------------------------------------------------------------------------

@bt.jit
def scaled_sum(x, y):
    return x * 2 + y


@settings(max_examples=12, deadline=None)
@given(views(max_rank=3), st.sampled_from(DTYPES))
def test_views_of_random_shapes_and_dtypes_agree_with_torch(spec, dtype):
    _, y = make(spec, dtype)
    x = torch.ones(y.shape, dtype=dtype)
    torch.testing.assert_close(scaled_sum(x, y), x * 2 + y)


@pytest.fixture
def copies(monkeypatch):
    """The tensors that runners made from now on copy (kernel._compact, the copying path)."""
    calls = []

    def counting(t):
        calls.append(tuple(t.shape))
        return original(t)
    original = kernel_module._compact
    monkeypatch.setattr(kernel_module, "_compact", counting)
    return calls


@pytest.mark.parametrize("make_view", [
    lambda: torch.randn(8, 3).T, lambda: torch.randn(4, 2, 3).permute(2, 0, 1),
    lambda: torch.randn(3, 4, 2, 5).to(memory_format=torch.channels_last),
    lambda: torch.randn(3, 4, 1, 5).permute(1, 3, 0, 2).expand(4, 5, 3, 6),
    lambda: torch.randn(3, 1).expand(3, 8), lambda: torch.randn(8, 1).expand(8, 3).T,
])
def test_permuted_and_broadcast_arguments_are_not_copied(copies, make_view):
    @bt.jit
    def f(x, y):
        return x * y

    y = make_view()
    x = torch.randn(y.shape)
    torch.testing.assert_close(f(x, y), x * y)
    assert copies == []
    k = f.compile(x, y)
    assert all(op.op not in ("permute_dims", "broadcast_to") or len(kernel.ops) > 1
               for kernel in k.fusion for op in kernel.ops), str(k.fusion)   # folded into the product


def test_a_gapped_slice_is_still_copied(copies):
    """The observable above does see copies: a slice with gaps takes it."""
    x = torch.randn(8, 6)[:, ::2]
    torch.testing.assert_close(scaled_sum(x, x), x * 3)
    assert copies == [(8, 3), (8, 3)]


def test_a_transposed_argument_makes_no_copy_kernel():
    @bt.jit
    def f(a, b):
        return torch.relu(a + b)

    a, b = torch.randn(32, 48), torch.randn(48, 32)
    k = f.compile(a, b.T)
    assert len(k.fusion) == 1 and [op.op for op in k.fusion[0].ops] == ["permute_dims", "add", "nn.relu"]
    torch.testing.assert_close(f(a, b.T), torch.relu(a + b.T))


def test_the_layout_keys_the_version_even_for_a_square_tensor():
    """A square tensor and its transpose have one shape and dtype: only the layout tells the versions apart."""
    @bt.jit
    def f(x, y):
        return x - y

    x, y = torch.randn(16, 16), torch.randn(16, 16)
    for _ in range(2):   # the second round takes the cached call path
        torch.testing.assert_close(f(x, y.T), x - y.T)
        torch.testing.assert_close(f(x, y), x - y)
        torch.testing.assert_close(f(x.T, y), x.T - y)
    assert f.cache_info()["versions"] == 3
    assert f.explain(x, y.T).parts["layout of `y`"] == "permuted: memory order (1, 0)"
    assert "layout of `y`" not in f.explain(x, y).parts


def test_a_direct_kernel_call_checks_the_layout():
    @bt.jit
    def f(x):
        return x * 3

    y = torch.randn(5, 7)
    k = f.compile(y.T)
    torch.testing.assert_close(k(y.T), y.T * 3)
    with pytest.raises(TypeError, match="another compiled version"):
        k(y.T.contiguous())
    torch.testing.assert_close(f.compile(y.T.contiguous())(y.T), y.T * 3)   # compact: takes any layout, copied
    backward = f.backward(y.T.requires_grad_())   # compiled for the caller's view: any layout
    torch.testing.assert_close(backward(y.T, torch.ones(7, 5)), torch.full((7, 5), 3.0))


def test_symbolic_sizes_permuted_and_a_static_axis_broadcast():
    @bt.jit
    def f(x: bt.Tensor(("n", 4), "float32"), w: bt.Tensor((4,), "float32")):
        return (x * w).sum(0)

    for n in (3, 9):
        x, w = torch.randn(4, n).T, torch.randn(1).expand(4)
        torch.testing.assert_close(f(x, w), (x * w).sum(0))


def test_half_precision_channels_last_reduction():
    @bt.jit
    def f(x):
        return x.float().mean(dim=(2, 3))

    x = torch.randn(2, 8, 5, 6, dtype=torch.float16).to(memory_format=torch.channels_last)
    torch.testing.assert_close(f(x), x.float().mean(dim=(2, 3)))


def test_numpy_and_bt_tensor_views_are_copied_and_right():
    x = torch.randn(6, 4)
    held = bt.Tensor((4, 6), "float32")
    held.data = x.T
    torch.testing.assert_close(scaled_sum(held, x.T), x.T * 3)
    torch.testing.assert_close(torch.as_tensor(scaled_sum(x.numpy().T, x.numpy().T)), x.T * 3)


# --------------------------------------------------------------------------------------------------
# arguments the function writes, and gradients
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make_view", [lambda t: t.T, lambda t: t, lambda t: t[:, ::2]])
def test_an_argument_updated_in_place_is_written_through_its_view(make_view):
    """The update is written back into the caller's (transposed) tensor, also where x and its update
    have one shape (square): never into the storage in the caller's order."""
    @bt.jit
    def f(x, y):
        x.add_(y * 2)
        x.mul_(3)

    @bt.jit
    def out_style(a, out):
        out.copy_(a.exp())

    for n in (3, 5):   # 3: a square x
        x = make_view(torch.randn(6, 2 * n))
        y = torch.randn(x.shape[1], x.shape[0]).T
        want = (x + y * 2) * 3
        f(x, y)
        torch.testing.assert_close(x, want)
        out, a = make_view(torch.zeros(6, 2 * n)), torch.randn(x.shape[1], 1).expand(x.shape[1], x.shape[0]).T
        out_style(a, out)
        torch.testing.assert_close(out, a.exp())


def test_gradients_through_permuted_and_broadcast_inputs():
    @bt.jit
    def f(x, w):
        return (torch.tanh(x) * w).sum(-1)

    base = torch.randn(5, 3, 4, requires_grad=True)
    w0 = torch.randn(4, 1, requires_grad=True)
    x, w = base.permute(1, 2, 0), w0.expand(4, 5)
    got = f(x, w)
    grads = torch.autograd.grad(got.sum(), [base, w0])
    want = torch.autograd.grad((torch.tanh(x) * w).sum(-1).sum(), [base, w0])
    torch.testing.assert_close(got, (torch.tanh(x) * w).sum(-1))
    for g, e in zip(grads, want):
        torch.testing.assert_close(g, e)


# --------------------------------------------------------------------------------------------------
# the GPU's code
# --------------------------------------------------------------------------------------------------

def test_cuda_code_for_a_transposed_argument_compiles_with_nvcc():
    @bt.jit(target=SM90)
    def f(a, b):
        return a + b

    a, b = torch.randn(256, 512, dtype=torch.float16), torch.randn(512, 256, dtype=torch.float16)
    k = f.compile(a, b.T)
    assert k.specs[1].layout == Layout((1, 0), ()) and len(k.fusion) == 1
    assert k.fusion[0].rule == "Tiled", str(k.fusion)   # both sides coalesced through shared memory
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        import tvm
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_permuted_and_broadcast_arguments_agree_with_torch(dtype):
    @bt.jit(target="gpu")
    def f(a, b, c):
        return a * b + c

    a = torch.randn(64, 96, 40, device="cuda", dtype=dtype)
    b = torch.randn(40, 64, 96, device="cuda", dtype=dtype).permute(1, 2, 0)
    c = torch.randn(96, 1, device="cuda", dtype=dtype).expand(96, 40)
    # the fused kernel rounds once, from float32 (torch's bfloat16 ops round after each op)
    want = (a.float() * b.float() + c.float()).to(dtype)
    torch.testing.assert_close(f(a, b, c), want)
    torch.testing.assert_close(f(a, b.contiguous(), c), want)
