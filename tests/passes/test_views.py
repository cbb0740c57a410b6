"""babytriton/passes/views.py: a view read by several kernels is repeated in each of them, so no kernel only
copies it; results compared with torch, forward and backward."""
import math

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import babytriton as bt

# views of a (4, 6) tensor w that broadcast against a (3, 4, 6) x
def unsqueeze(w):
    return w.unsqueeze(0)


def reshape(w):
    return w.reshape(1, 4, 6)


def transpose_back(w):
    return w.t().t()


def whole_slice(w):
    return w[:, :]


def expand(w):
    return w.expand(3, 4, 6)


VIEWS = {f.__name__: f for f in (unsqueeze, reshape, transpose_back, whole_slice, expand)}


def only_views(fusion) -> list[str]:
    return [line for line in str(fusion).splitlines() if line.startswith("kernel")
            and any(f"kernel {name}" in line for name in ("expand_dims", "reshape", "permute_dims", "strided_slice",
                                                          "broadcast_to", "squeeze"))]


def rotate(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def test_rotary_embedding_is_a_kernel_per_result():
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)
    cos, sin = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
    f = bt.jit(rotary)
    fusion = f.compile(q, k, cos, sin).fusion
    assert len(fusion) == 2 and not only_views(fusion), str(fusion)
    for got, want in zip(f(q, k, cos, sin), rotary(q, k, cos, sin)):
        torch.testing.assert_close(got, want)


@settings(max_examples=6, deadline=None)
@given(view=st.sampled_from(sorted(VIEWS)), readers=st.integers(2, 3), seed=st.integers(0, 9))
def test_a_shared_view_fuses_into_every_reader(view, readers, seed):
    make = VIEWS[view]

    def f(x, w, readers: bt.constexpr):
        v = make(w)
        return tuple((x + i) * v for i in range(readers))
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(3, 4, 6, generator=gen), torch.randn(4, 6, generator=gen, requires_grad=True)
    jitted = bt.jit(f)
    assert not only_views(jitted.compile(x, w, readers).fusion)
    got, want = jitted(x, w, readers), f(x, w, readers)
    for g, t in zip(got, want):
        torch.testing.assert_close(g, t)
    grad_got = torch.autograd.grad(sum(g.sum() for g in got), w)[0]
    grad_want = torch.autograd.grad(sum(t.sum() for t in want), w)[0]
    torch.testing.assert_close(grad_got, grad_want)


def test_a_view_that_is_a_result_keeps_its_value():
    def f(w):
        v = w.unsqueeze(0)
        return v, v * 2, v + 1
    w = torch.randn(4, 6)
    for got, want in zip(bt.jit(f)(w), f(w)):
        torch.testing.assert_close(got, want)


def _flip_flat(x):
    return torch.flip(x.reshape(-1), [0]) * 2


def _flip_rows_of_view(x):
    return torch.flip(x.reshape(x.shape[0] * x.shape[1], -1), [0, 1]) + 1


def _flip_transposed(x):
    return torch.flip(x.transpose(0, 1).reshape(-1), [0]).cumsum(0)


@pytest.mark.parametrize("f", [_flip_flat, _flip_rows_of_view, _flip_transposed])
@pytest.mark.parametrize("shape", [(3, 4, 2), (5, 8, 3), (2, 16, 4)])
def test_a_flip_of_a_view_reads_the_view_reversed(f, shape):
    """A view read reversed stays a block of its own (views._read_reversed): inlined, TVM's iter-map
    normalisation rewrote `(11 - v) % 4` wrongly and every flip of a reshape read wrong elements."""
    x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
    torch.testing.assert_close(bt.jit(f)(x), f(x), rtol=0, atol=0)


# -- a cast of an input read by several kernels: each reads the input (views.repeat_views) --------

def upcast_twice(x):
    h = x.float()
    scale = h.abs().amax(dim=0, keepdim=True).clamp_min(1e-5)
    return (h / scale).round(), h.t() * 2, h.mean(-1)


def upcast_of_a_view(x):
    h = x.t().float()
    return h.sum(0), h * h


@settings(max_examples=6, deadline=None)
@given(dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.int8]), rows=st.integers(1, 9),
       cols=st.integers(1, 70), which=st.sampled_from([upcast_twice, upcast_of_a_view]))
def test_a_shared_cast_of_an_input_is_read_by_every_kernel(dtype, rows, cols, which):
    """`h = x.float()` read by several kernels: no kernel writes the float32 copy, each reads x."""
    gen = torch.Generator().manual_seed(rows * cols)
    x = (torch.randn(rows, cols, generator=gen) * 8).to(dtype)
    if dtype.is_floating_point:
        x.view(-1)[0] = float("nan")
    f = bt.jit(which)
    kernels = [line for line in str(f.compile(x).fusion).splitlines() if line.startswith("kernel")]
    assert not any(line.startswith("kernel cast ") for line in kernels), kernels
    for got, want in zip(f(x), which(x)):
        torch.testing.assert_close(got, want, equal_nan=True)


# -- casts moved past views (views.casts_past_views): a cast before a reshape fuses into the rows ----

def group_norm_of_halves(x):
    h = x.float()
    g = h.reshape(x.shape[0], 2, -1)
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    return ((g - mu) / torch.sqrt(var + 1e-5)).reshape(x.shape).to(x.dtype)


def cast_then_views(x):
    return x.to(torch.float32).unsqueeze(0).sum(-1), x.to(torch.float32)[:, 1:].reshape(-1).amax()


def row_sums_cast_back(x):
    s = x.float().sum(-1, keepdim=True)
    return (x / s).reshape(-1).half(), s.squeeze(-1).to(torch.bfloat16)


@settings(max_examples=8, deadline=None, phases=(Phase.explicit, Phase.generate))  # failures not shrunk: minutes of CI
@given(which=st.sampled_from([group_norm_of_halves, cast_then_views, row_sums_cast_back]),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]), n=st.integers(1, 3),
       c=st.sampled_from([2, 4, 6]), w=st.integers(2, 40))
def test_casts_fuse_through_views(which, dtype, n, c, w):
    """`x.float().reshape(...)` and `y.reshape(...).half()`: no kernel only casts (and views): the cast
    is in the kernel reading or computing the rows; results equal torch's."""
    gen = torch.Generator().manual_seed(n * 100 + c * 10 + w)
    x = (torch.rand(n, c, w, generator=gen) + 0.5).to(dtype)
    if which is cast_then_views:
        x = x.reshape(n * c, w)
    f = bt.jit(which)
    for line in str(f.compile(x).fusion).splitlines():
        if line.startswith("kernel"):
            name = line.split()[1]
            assert set(name.removeprefix("fused_").split("_")) - {"cast", "reshape", "transpose", "expand",
                                                                  "dims", "1", "2"}, line
    got, want = f(x), which(x)
    for g, t in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        tol = {} if t.dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        torch.testing.assert_close(g, t, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_reshaped_result_of_a_row_kernel_with_side_results_is_a_view(dtype):
    """The row kernel writes `x / s` and its side result `s`; `.reshape(-1)` of the first is a view
    of its buffer (FreeReshapes), not a copy kernel, though the kernel returns a tuple."""
    x = (torch.rand(3, 6, 40, generator=torch.Generator().manual_seed(0)) + 0.5).to(dtype)
    f = bt.jit(row_sums_cast_back)
    names = [line.split()[1] for line in str(f.compile(x).fusion).splitlines() if line.startswith("kernel")]
    assert not any("reshape" in name for name in names), names
    for got, want in zip(f(x), row_sums_cast_back(x)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


# -- element-wise work after a reshape of a computed value joins the kernel computing it -----------

def group_norm_affine(x, weight, bias):
    n, c, h, w = x.shape
    g = x.reshape(n, 2, -1)
    mean = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    g = (g - mean) / torch.sqrt(var + 1e-5)
    return g.reshape(n, c, h, w) * weight[None, :, None, None] + bias[None, :, None, None]


def softmax_reshaped_then_pointwise(x, y):
    s = torch.softmax(x.reshape(x.shape[0], -1), dim=-1)
    return torch.exp(s.reshape(x.shape)) * y - 2.0


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 3), c=st.sampled_from([2, 4, 6]), hw=st.sampled_from([(1, 1), (2, 3), (5, 5)]),
       which=st.sampled_from(["gn", "softmax"]))
def test_pointwise_after_a_reshape_joins_the_rows(n, c, hw, which):
    """`g.reshape(x.shape) * weight[:, None, None] + bias[...]`: the affine step is in the row kernel
    (no kernel writes the normalised tensor for another to read), reading the weights through their
    index; results equal torch's."""
    gen = torch.Generator().manual_seed(n * 100 + c * 10 + hw[0])
    x = torch.randn(n, c, *hw, generator=gen)
    args = (x, torch.randn(c, generator=gen), torch.randn(c, generator=gen)) if which == "gn" else \
        (x, torch.randn(c, *hw, generator=gen))
    fn = group_norm_affine if which == "gn" else softmax_reshaped_then_pointwise
    f = bt.jit(fn)
    kernels = [line for line in str(f.compile(*args).fusion).splitlines() if line.startswith("kernel")]
    last, reduced = ("add", ("mean",)) if which == "gn" else ("subtract", ("max", "sum", "softmax"))
    apart = [line for line in kernels if last in line.split()[1] and not any(r in line.split()[1] for r in reduced)]
    assert not apart, kernels
    torch.testing.assert_close(f(*args), fn(*args), rtol=1e-4, atol=1e-5)


def reshaped_then_modulo(x0, x1, x2):
    v = (x1 + x0).reshape(2, 2) % x0        # the integer `%` checks its divisor first: a second block
    return x2 > v, v


def test_a_rewrite_reads_only_its_own_blocks_values():
    args = (torch.tensor([3], dtype=torch.int32), torch.arange(4, dtype=torch.int16), torch.randn(2, 2))
    for got, want in zip(bt.jit(reshaped_then_modulo)(*args), reshaped_then_modulo(*args)):
        torch.testing.assert_close(got, want)
