"""The gradients of the ops babytriton's code generator emits (babytriton/autodiff/gradients.py): compiled
backwards checked by torch.autograd.gradcheck in float64 on @jit functions covering the op table, and
torch's choices where a derivative is undefined (ties, zeros, bounds, NaN) checked exactly against
torch autograd on the same inputs. Every test but the fallback's makes a fallback to torch autograd an
error, so what is checked is the compiled backward."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.script import relax as R

import babytriton as bt
from babytriton import GradientFallbackWarning
from babytriton.codegen import library

f64 = torch.float64
NAN, INF = math.nan, math.inf
EXAMPLES = settings(max_examples=4, deadline=None)


@pytest.fixture(autouse=True)
def compiled_backward_only():
    """A backward that falls back to torch autograd over the eager reference fails the test (and the
    inputs are seeded)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientFallbackWarning)
        yield


def leaf(t, requires=True):
    return t.detach().clone().requires_grad_(requires and t.is_floating_point())


def gradcheck(fn, *inputs, requires=None):
    """gradcheck of the @jit function `fn` in float64 (inputs that are tensors; `requires` says which
    of them are differentiated, default every float one)."""
    requires = list(requires or []) + [True] * (len(inputs) - len(requires or []))
    args = tuple(leaf(t, r) if isinstance(t, torch.Tensor) else t for t, r in zip(inputs, requires))
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)


def grads(fn, *inputs, upstream=None):
    """The gradients of every float input after fn(*inputs).backward(upstream) (ones by default)."""
    args = [leaf(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    out = fn(*args)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.is_floating_point()]
    torch.autograd.backward(outs, [torch.ones_like(o) if upstream is None else upstream for o in outs])
    return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def same_grads(jitted, reference, *inputs, exact=True):
    """The compiled backward gives torch's gradients on these inputs (NaN where torch has NaN)."""
    got, want = grads(jitted, *inputs), grads(reference, *inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = torch.zeros_like(g) if w is None else w  # an input torch's graph never reached (its grad None)
        if exact:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g, w, equal_nan=True)


def t(values):
    return torch.tensor(values, dtype=f64)


def rand(*shape, low=-1.0, high=1.0):
    return torch.rand(tuple(shape), dtype=f64) * (high - low) + low


def away_from(x, points, gap=0.05):
    """x with each element moved at least `gap` away from `points` (kinks, bounds, ties)."""
    for p in points:
        near = (x - p).abs() < gap
        x = torch.where(near, x + 2 * gap * torch.sign(x - p + 1e-12), x)
    return x


# --------------------------------------------------------------------------------------------------
# element-wise
# --------------------------------------------------------------------------------------------------
@bt.jit
def smooth_unary(x):
    return bt.exp(x) + bt.log(x + 2.0) + bt.sin(x) * bt.cos(x) + bt.tanh(x) + bt.sigmoid(x) + bt.sqrt(x + 1.5) \
        + bt.rsqrt(x + 1.5) + bt.square(x) - x


@bt.jit
def activations(x):
    return bt.gelu(x) + R.nn.gelu_tanh(x) + bt.erf(x) + bt.silu(x) + R.nn.softplus(x, 2.0, 1.0) + R.nn.selu(x) \
        + R.nn.leakyrelu(x, 0.1) + bt.relu(x) + bt.abs(x)


@bt.jit
def trigonometry(x):
    return R.tan(x) + R.sinh(x) + R.cosh(x) + R.asin(x) + R.acos(x) + R.atan(x) + R.asinh(x) + R.atanh(x) \
        + R.acosh(x + 2.0)


@bt.jit
def pieces(x, y):
    return bt.clip(x, -0.5, 0.5) + bt.maximum(x, y) * 2.0 - bt.minimum(x, y) + bt.floor(x) + bt.sign(y)


@bt.jit
def powers(x, y):
    return x ** y + x ** 3 + x ** 0.5 + x ** -2 + 2.0 ** y + bt.power(x, 1.5)


@bt.jit
def two_argument(a, b):
    return R.atan2(a, b) + R.log_add_exp(a, b) + a % b + R.mod(a, b)


def test_gradcheck_smooth_unary():
    gradcheck(smooth_unary, rand(3, 5))


def test_gradcheck_activations_away_from_kinks():
    gradcheck(activations, away_from(rand(4, 6, low=-3, high=3), [0.0, 0.5]))


def test_gradcheck_trigonometry():
    gradcheck(trigonometry, rand(2, 7, low=-0.9, high=0.9))


def test_gradcheck_clip_maximum_minimum_rounding():
    x = away_from(rand(3, 4), [-0.5, 0.5])
    y = away_from(rand(3, 4), [0.0])
    y = torch.where((x - y).abs() < 0.05, y + 0.2, y)  # no ties (checked exactly below)
    gradcheck(pieces, x, y)


def test_gradcheck_powers():
    gradcheck(powers, rand(3, 4, low=0.5, high=2), rand(3, 4, low=-1, high=2))


def test_gradcheck_two_argument_ops():
    a = rand(3, 4, low=0.5, high=3)
    b = rand(3, 4, low=0.7, high=1.3)
    # % and fmod jump where a / b is an integer: stay clear of those
    a = torch.where((a / b - torch.round(a / b)).abs() < 0.05, a + 0.3 * b, a)
    gradcheck(two_argument, a, b)


@bt.jit
def broadcasting(x, y, z):
    return (x + y) * z - x / (y * y + 1.0) + (z - y) * 0.5


shapes3 = st.sampled_from([((3, 1, 4), (2, 4), (4,)), ((1, 5), (3, 1), ()), ((2, 3), (2, 3), (1, 3)),
                           ((4,), (2, 3, 4), (3, 1))])


@EXAMPLES
@given(shapes=shapes3)
def test_gradcheck_binary_broadcasting(shapes):
    gradcheck(broadcasting, *(rand(*s) for s in shapes))


@bt.jit
def masked(x, y, mask):
    kept = bt.where(mask, x * y, -y)
    return bt.where(x > 0.0, kept, x * 3.0) + (y if True else x)


def test_gradcheck_where_and_masks():
    x = away_from(rand(3, 5), [0.0])
    mask = torch.rand(3, 5) > 0.5
    gradcheck(masked, x, rand(3, 5), mask)


@bt.jit
def where_of_broadcast_sides(x, row, col):
    return torch.where(x > 0.0, row, col * 2.0) * x


@bt.jit
def row_assigned(x):
    y = x.clone()
    y[:, 0] = y[:, 0] * 2.0
    return y


def test_gradcheck_where_of_broadcast_sides():
    """A side of `where` broadcast to the result (as a slice assignment `y[:, 0] = ...` writes it) gets
    its gradient summed back to its own shape: TVM's rule gave it the result's, which failed the
    Gradient pass (the backward fell back to torch autograd)."""
    gradcheck(where_of_broadcast_sides, away_from(rand(3, 5), [0.0]), rand(1, 5), rand(3, 1))
    gradcheck(row_assigned, rand(2, 4, 3))


# --------------------------------------------------------------------------------------------------
# reductions and scans
# --------------------------------------------------------------------------------------------------
@bt.jit
def summed(x, axis: bt.constexpr, keepdims: bt.constexpr):
    return bt.sum(x * x, axis=axis, keepdims=keepdims) + x.mean(axis=axis, keepdims=keepdims)


@EXAMPLES
@given(axis=st.sampled_from([None, 0, 1, -1, (0, 2), (1, 2)]), keepdims=st.booleans())
def test_gradcheck_sum_and_mean_over_axes(axis, keepdims):
    gradcheck(summed, rand(2, 3, 4), axis, keepdims)


@bt.jit
def extremes(x):
    return bt.max(x, axis=1) * 2.0 + bt.min(x, axis=(0, 2)).sum() + x.max() \
        + bt.max(x, axis=-1, keepdims=True).sum(axis=1)


def test_gradcheck_max_min_reductions():
    gradcheck(extremes, torch.randperm(24, dtype=f64).reshape(2, 3, 4) / 7)  # distinct values: no ties


@bt.jit
def spread(x):
    return R.variance(x, 1, keepdims=True) + R.std(x, (0, 2)).sum() + R.std(x, keepdims=True) * x


def test_gradcheck_variance_and_std():
    gradcheck(spread, rand(2, 3, 4))


@bt.jit
def products(x):
    return bt.prod(x, 1) + bt.prod(x, axis=(0, 1)) + bt.prod(x)


def test_gradcheck_prod():
    gradcheck(products, rand(3, 4, low=0.5, high=1.5))


@bt.jit
def scans(x):
    return bt.cumsum(x, axis=1) + bt.cumsum(x, axis=0, exclusive=True) * 2.0 + bt.cumsum(x).reshape((3, 4))


def test_gradcheck_cumsum():
    gradcheck(scans, rand(3, 4))


# --------------------------------------------------------------------------------------------------
# matmul, softmax, normalisations
# --------------------------------------------------------------------------------------------------
@bt.jit
def product(a, b):
    return a @ b


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (2, 4, 3)),
                                   ((2, 3, 4), (4,)), ((4,), (4,))])
def test_gradcheck_matmul_broadcasting(sa, sb):
    gradcheck(product, rand(*sa), rand(*sb))


@bt.jit
def mlp(x, w1, b1, w2):
    h = bt.gelu(bt.matmul(x, w1) + b1)
    return h @ w2.T + R.outer(x.sum(axis=1), w2.sum(axis=1))


def test_gradcheck_mlp():
    gradcheck(mlp, rand(4, 3), rand(3, 5), rand(5), rand(6, 5))


@bt.jit
def attention(q, k, v):
    scores = q @ bt.permute_dims(k, (0, 2, 1)) * 0.5
    return bt.softmax(scores, axis=-1) @ v


@bt.jit
def swiglu(x, w1, w2, w3):
    return (bt.silu(x @ w1) * (x @ w2)) @ w3


def test_gradcheck_attention_and_swiglu():
    gradcheck(attention, rand(2, 4, 3), rand(2, 5, 3), rand(2, 5, 2))
    gradcheck(swiglu, rand(3, 4), rand(4, 6), rand(4, 6), rand(6, 2))


@bt.jit
def softmax_by_hand(x):
    e = bt.exp(x - bt.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@bt.jit
def log_softmax_by_hand(x):
    shifted = x - x.max(axis=0, keepdims=True)
    return shifted - bt.log(bt.exp(shifted).sum(axis=0, keepdims=True))


@bt.jit
def softmax_library(x):
    return bt.softmax(x, axis=0) * 2.0 + bt.log_softmax(x) + bt.softmax(x, axis=-1)


@pytest.mark.parametrize("fn", [softmax_by_hand, log_softmax_by_hand, softmax_library])
def test_gradcheck_softmax(fn):
    gradcheck(fn, rand(3, 5, low=-3, high=3))


@bt.jit
def cross_entropy(logits, target):
    shifted = logits - bt.max(logits, axis=-1, keepdims=True)
    log_probs = shifted - bt.log(bt.exp(shifted).sum(axis=-1, keepdims=True))
    return -(log_probs * target).sum(axis=-1).mean()


def test_gradcheck_cross_entropy_written_by_the_user():
    target = F.one_hot(torch.tensor([0, 3, 1]), 4).to(f64)
    gradcheck(cross_entropy, rand(3, 4, low=-2, high=2), target, requires=[True, False])


@bt.jit
def layer_norm_by_hand(x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred * bt.rsqrt(var + 1e-5) * w + b


@bt.jit
def rms_norm_by_hand(x, w):
    return x / bt.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w


def test_gradcheck_layer_norm_from_primitives():
    gradcheck(layer_norm_by_hand, rand(4, 8), rand(8), rand(8))


def test_gradcheck_rms_norm_from_primitives():
    gradcheck(rms_norm_by_hand, rand(4, 8), rand(8))


def test_layer_norm_and_rms_norm_ops_match_torch_in_float32():
    """TVM's layer_norm / rms_norm take float32 (no float64, so no gradcheck): torch's gradients."""
    @bt.jit
    def norms(x, w, b):
        return bt.layer_norm(x, w, b, -1) * 2.0 + bt.rms_norm(x, w)

    @bt.jit
    def middle_axis(x, w, b):
        return bt.layer_norm(x, w, b, 1)

    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    got = grads(norms, x, w, b)
    ref = [a.detach().clone().requires_grad_() for a in (x, w, b)]
    (F.layer_norm(ref[0], (8,), ref[1], ref[2]) * 2 + F.rms_norm(ref[0], (8,), ref[1], 1e-5)).sum().backward()
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.float(), r.grad, rtol=1e-4, atol=1e-5)
    x3, w3, b3 = torch.randn(2, 3, 4), torch.randn(3), torch.randn(3)
    got = grads(middle_axis, x3, w3, b3)
    ref = [a.detach().clone().requires_grad_() for a in (x3, w3, b3)]
    F.layer_norm(ref[0].transpose(1, 2), (3,), ref[1], ref[2]).sum().backward()
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.float(), r.grad, rtol=1e-4, atol=1e-5)


@bt.jit
def grouped_norms(x, w, b, y):
    return R.nn.group_norm(x, w, b, 3, 1, [2]) + R.nn.instance_norm(x, w, b, 1, [2]) * 2.0, \
        R.nn.group_norm(y, w, b, 2, -1, [1, 2])


def test_group_norm_and_instance_norm_match_torch_in_float32():
    x, w, b, y = torch.randn(2, 6, 5), torch.randn(6), torch.randn(6), torch.randn(2, 5, 4, 6)

    def reference(x, w, b, y):
        return F.group_norm(x, 3, w, b) + F.instance_norm(x, weight=w, bias=b) * 2, \
            F.group_norm(y.permute(0, 3, 1, 2), 2, w, b).permute(0, 2, 3, 1)

    for g, r in zip(grads(grouped_norms, x, w, b, y), grads(reference, x, w, b, y)):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------
# shapes and data movement
# --------------------------------------------------------------------------------------------------
@bt.jit
def reshaped(x, y):
    a = bt.permute_dims(x, (1, 0, 2)).reshape((3, 8)) + bt.broadcast_to(y, (3, 8))
    b = bt.squeeze(bt.expand_dims(a, 0)) + bt.flatten(x).reshape((3, 8)) + x.T.sum(axis=2).sum()
    return bt.concat((a, b * 2.0), axis=1) + bt.stack((a, b), 0).sum(axis=0).sum(axis=1, keepdims=True)


def test_gradcheck_shape_ops():
    gradcheck(reshaped, rand(2, 3, 4), rand(8))


@bt.jit
def moved(x, index, gather):
    tiled = R.tile(x, (2, 1)).sum(axis=0) + R.repeat(x, 2, 0).sum(axis=0) + R.repeat(x, 2).sum()
    sliced = R.strided_slice(x, axes=[1], begin=[1], end=[6], strides=[2]) * 3.0
    backwards = R.strided_slice(x, axes=[0, 1], begin=[2, 5], end=[0, 0], strides=[-1, -2])
    picked = R.take(x, index, 1) + R.gather_elements(x, gather, 1)
    first = tiled.sum() + sliced.sum(axis=1, keepdims=True) + backwards.sum() + picked
    return first, bt.tril(x, -1) + bt.triu(x, 1) * 2.0


def test_gradcheck_data_movement():
    index = torch.tensor([0, 5, 5, 2])
    gather = torch.tensor([[0, 1, 1, 5], [2, 2, 2, 2], [5, 4, 3, 0]])
    gradcheck(moved, rand(3, 6), index, gather, requires=[True, False, False])


@bt.jit
def sorted_values(x):
    return R.sort(x, 1) * bt.exp(x) + R.topk(x, 2, 0, "values").sum()


def test_gradcheck_sort_and_topk():
    gradcheck(sorted_values, torch.randperm(12, dtype=f64).reshape(3, 4) / 5)


@bt.jit
def rearranged(a, b, updates, index, src, alpha):
    mixed = R.einsum((a, b), "abc,abd->acd") + R.einsum((a,), "abc->cb").sum() + R.einsum((a, b), "abc,xbd->ad").sum()
    padded = R.nn.pad(a, (0, 0, 1, 1, 2, 0)).sum(axis=2)
    scattered = R.scatter_elements(a, index, updates, 1) + R.scatter_elements(a, index, updates, 1, "add") \
        + R.slice_scatter(a, src, 0, 3, 2, 1) * 2.0
    activated = R.nn.prelu(a, alpha, 1) + R.nn.batch_flatten(a).reshape((2, 3, 4)) + R.collapse_sum_to(a, (3, 1))
    return mixed.sum(axis=2) + padded.sum(axis=1, keepdims=True), scattered * activated


def test_gradcheck_einsum_pad_scatters_prelu():
    index = torch.tensor([[[0, 1, 0, 2]]]).expand(2, 1, 4).contiguous()
    gradcheck(rearranged, rand(2, 3, 4), rand(2, 3, 5), rand(2, 1, 4), index, rand(2, 2, 4), rand(3),
              requires=[True, True, True, False])


def test_a_form_a_rule_does_not_cover_falls_back_naming_its_line():
    @bt.jit
    def f(x):
        y = x * 2.0
        return R.nn.pad(y, (0, 0, 1, 1), "reflect")

    # the eager reference has no pad either: the fallback then says so (after the warning)
    with pytest.warns(GradientFallbackWarning, match=r"`pad` in mode 'reflect'.* at .*test_gradients.py:\d+"), \
            pytest.raises(NotImplementedError, match="pad"):
        grads(f, rand(3, 4))


# --------------------------------------------------------------------------------------------------
# compile-time control flow, unrolled loops, @jit calling @jit, several outputs, scalars
# --------------------------------------------------------------------------------------------------
@bt.jit
def branches(x, w, mode: bt.constexpr):
    if mode == "tanh":
        y = bt.tanh(x * w)
    elif mode == "square":
        y = x * x * w
    else:
        y = x + w
    if x.shape[0] > 2:  # a static size: compile-time too
        y = y * 2.0
    return y


@pytest.mark.parametrize("mode", ["tanh", "square", "add"])
def test_gradcheck_constexpr_branches(mode):
    gradcheck(branches, rand(3, 4), rand(4), mode)


@bt.jit
def unrolled(x, w, b, steps: bt.constexpr):
    for i in range(steps):
        x = bt.tanh(x @ w + b * (i + 1))
    for scale in (0.5, 2.0):
        x = x * scale + w.sum()
    return x


def test_gradcheck_unrolled_loops():
    gradcheck(unrolled, rand(2, 4), rand(4, 4), rand(4), 3)


@bt.jit
def inner(x, w):
    return bt.sigmoid(x * w) * x


@bt.jit
def outer_calls_inner(x, w):
    return inner(x, w) + inner(w, x).sum(axis=0)


def test_gradcheck_jit_calling_jit():
    gradcheck(outer_calls_inner, rand(3, 4), rand(3, 4))


@bt.jit
def several(x, y):
    return x * y, bt.exp(x).sum(axis=0), x - y * 2.0


def test_gradcheck_several_outputs():
    gradcheck(several, rand(3, 4), rand(3, 4))


@bt.jit
def scaled(x, y, s: float, n: int):
    return x * s + y ** n + x * y * n


def test_gradcheck_run_time_scalars_and_an_input_without_grad():
    gradcheck(scaled, rand(3, 4), rand(3, 4), 1.5, 3, requires=[True, False])
    gradcheck(scaled, rand(3, 4), rand(3, 4), -0.5, 2)


# --------------------------------------------------------------------------------------------------
# torch's choices where the derivative is undefined: exactly torch's gradients on the same inputs
# --------------------------------------------------------------------------------------------------
EDGES = t([[-2.0, -1.0, 0.0, 0.0, 1.0, NAN], [2.0, 0.5, -0.0, 1.0, INF, -INF]])
OTHER = t([[-2.0, 1.0, 0.0, -1.0, 1.0, 1.0], [NAN, 0.5, 0.0, 1.0, INF, 0.0]])


@bt.jit
def kinks(x, y):
    return (bt.abs(x), bt.relu(x), bt.maximum(x, y), bt.minimum(x, y), bt.clip(x, -1.0, 1.0),
            R.nn.leakyrelu(x, 0.2), R.nn.selu(x))


def torch_kinks(x, y):
    return (torch.abs(x), torch.relu(x), torch.maximum(x, y), torch.minimum(x, y), torch.clamp(x, -1.0, 1.0),
            F.leaky_relu(x, 0.2), vectorised(F.selu, x))


def vectorised(fn, x):
    """fn(x) with every element in torch's vectorised loop (x at the head of 1,024 elements, a multiple
    of every vector's length): its scalar loop, which takes a tail as long as the CPU's vector width
    decides, differs at NaN for some ops (selu's gradient: g * scale there, NaN in the vectors)."""
    flat = torch.cat([x.reshape(-1), x.new_zeros(1024 - x.numel())])
    return fn(flat)[: x.numel()].reshape(x.shape)


def test_kinks_ties_and_nan_match_torch(cpu_target):
    """abs'(0) = relu'(0) = 0, maximum/minimum split a tie, clamp passes at its bounds, NaN as torch."""
    same_grads(bt.jit(target=cpu_target)(kinks.fn), torch_kinks, EDGES, OTHER)


def test_each_kink_alone_matches_torch(cpu_target):
    f = bt.jit(target=cpu_target)(kinks.fn)
    for i in range(7):
        same_grads(lambda x, y, i=i: f(x, y)[i], lambda x, y, i=i: torch_kinks(x, y)[i], EDGES, OTHER)


@bt.jit
def tied_extremes(x):
    return bt.max(x, axis=1), bt.min(x, axis=0, keepdims=True), bt.max(x), bt.min(x, axis=(0, 1))


def test_max_min_share_the_gradient_among_ties_like_amax():
    x = t([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [NAN, 1.0, 5.0, 0.0]])
    same_grads(tied_extremes, lambda x: (torch.amax(x, 1), torch.amin(x, 0, keepdim=True), torch.amax(x),
                                         torch.amin(x, (0, 1))), x, exact=False)
    same_grads(tied_extremes, lambda x: (torch.amax(x, 1), torch.amin(x, 0, keepdim=True), torch.amax(x),
                                         torch.amin(x, (0, 1))), x[:2], exact=False)


@bt.jit
def power_at_zero(x, y):
    return x ** y, x ** 0.5, x ** 0.0 + x ** 2.5


def test_power_at_zero_matches_torch():
    """d/dx of x**0 is 0 (not 0 * 0**-1), d/dy is 0 where x == 0 and y >= 0, sqrt'(0) = inf."""
    x = t([0.0, 0.0, 0.0, 0.0, 2.0, 1.0])
    y = t([0.0, 2.0, -1.0, 0.5, 0.0, 3.0])
    same_grads(power_at_zero, lambda x, y: (x ** y, x ** 0.5, x ** 0.0 + x ** 2.5), x, y, exact=False)


@bt.jit
def through_integers(x):
    return x.astype("int64").astype("float64") * x + (x > 0.5).astype("float64") + bt.floor(x) + bt.round(x) \
        + bt.argmax(x, axis=0).astype("float64").sum() + bt.where(bt.isnan(x), 0.0, x)


def test_integer_bool_and_rounding_paths_carry_no_gradient():
    x = t([[1.5, 2.25, NAN], [0.25, -3.5, 1.0]])
    same_grads(through_integers, lambda x: x.to(torch.int64).to(f64) * x + (x > 0.5).to(f64) + torch.floor(x)
               + torch.round(x) + torch.argmax(x, 0).to(f64).sum() + torch.where(torch.isnan(x), 0.0, x), x)


@bt.jit
def only_an_index(x):
    return bt.argmax(x, axis=1), x * 2.0


def test_an_integer_result_is_not_differentiable():
    x = leaf(rand(3, 4))
    index, y = only_an_index(x)
    assert not index.requires_grad and y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


@bt.jit
def nan_trap(x):
    return bt.where(x > 0.0, bt.sqrt(x), 0.0) + bt.where(x > 0.0, bt.log(x), x)


def test_where_over_a_nan_branch_matches_torch():
    """The gradient of the unselected branch is 0 * (its NaN derivative): NaN, in torch too."""
    same_grads(nan_trap, lambda x: torch.where(x > 0, torch.sqrt(x), 0.0) + torch.where(x > 0, torch.log(x), x),
               t([-1.0, 0.0, 4.0]))


def test_exclusive_cumsum_matches_torch():
    """TVM's cumsum rule ignores `exclusive` (and computes sum - cumsum + g, which cancels digits)."""
    @bt.jit
    def f(x):
        return bt.cumsum(x, axis=1, exclusive=True) + bt.cumsum(x, axis=0) * 2.0

    def reference(x):
        return torch.cat([torch.zeros(3, 1, dtype=f64), x.cumsum(1)[:, :-1]], 1) + x.cumsum(0) * 2

    same_grads(f, reference, rand(3, 5) * 1e8, exact=False)


def test_triu_with_an_offset():
    """TVM's triu rule gives no partial for the offset (Gradient refused it)."""
    @bt.jit
    def f(x):
        return bt.triu(x, 1) * 3.0 + bt.tril(x, -1)

    same_grads(f, lambda x: torch.triu(x, 1) * 3 + torch.tril(x, -1), rand(4, 5))


def test_std_of_a_constant_row_has_zero_gradient():
    @bt.jit
    def f(x):
        return R.std(x, 1)

    same_grads(f, lambda x: x.std(1, correction=0), t([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]]), exact=False)


def test_prod_with_zeros_matches_torch():
    @bt.jit
    def f(x):
        return bt.prod(x, 1), bt.prod(x)

    x = t([[1.0, 0.0, 3.0], [0.0, 0.0, 2.0], [2.0, 3.0, 4.0]])
    same_grads(f, lambda x: (x.prod(1), x.prod()), x)
    same_grads(f, lambda x: (x.prod(1), x.prod()), x[2:])


@bt.jit
def over_empty(x, y, w):
    rows = x.sum(axis=0) + bt.prod(x, 0) + bt.cumsum(x, axis=0).sum(axis=0) + bt.softmax(x, axis=1).sum(axis=0)
    columns = bt.cumsum(y, axis=1).sum(axis=1) + bt.prod(y, 1) + bt.max(x, axis=1).sum()
    return rows + (x @ w).sum(axis=1).sum(), columns


def test_empty_tensors_have_empty_gradients():
    """Size-0 axes: the scans' padding (concat with zeros, then a slice) differentiates too."""
    def reference(x, y, w):
        rows = x.sum(0) + x.prod(0) + x.cumsum(0).sum(0) + torch.softmax(x, 1).sum(0)
        return rows + (x @ w).sum(1).sum(), y.cumsum(1).sum(1) + y.prod(1) + x.amax(1).sum()

    same_grads(over_empty, reference, rand(0, 4), rand(3, 0), rand(4, 2))


def test_a_shared_upstream_gradient_feeding_two_fused_partials():
    """log_add_exp's partials g/(1+exp(b-a)) and g/(1+exp(a-b)) are two calls of one FuseOps function,
    merged into one kernel by FuseMultiOutput (which bound that function's vars twice)."""
    @bt.jit
    def f(a, b):
        return R.log_add_exp(a, b) * 2.0

    same_grads(f, lambda a, b: torch.logaddexp(a, b) * 2, rand(3, 4), rand(3, 4), exact=False)


# --------------------------------------------------------------------------------------------------
# the op table, and the ops left without a gradient
# --------------------------------------------------------------------------------------------------
# Relax ops of the library with no gradient: their backwards run torch autograd over the eager
# reference (with a warning). Pools, convolutions and attention other than TVM's own, set ops, and
# scatters/gathers by index tensors; cumprod (torch's rule divides by the input where it is not 0).
WITHOUT_GRADIENT = {
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "attention", "attention_bias",
    "attention_var_len", "avg_pool1d", "avg_pool3d", "batch_norm", "conv1d", "conv1d_transpose", "conv2d_transpose",
    "conv3d", "conv3d_transpose", "cumprod", "dequantize", "dropout", "dynamic_strided_slice", "floor_divide",
    "gather_nd", "index_put", "index_tensor", "layout_transform", "max_pool1d",
    "max_pool3d", "median", "meshgrid", "multinomial_from_uniform", "nonzero", "pixel_shuffle", "quantize",
    "reverse_sequence", "scatter_nd", "sort", "topk", "unique",
}


def test_every_library_op_has_a_gradient_or_is_listed():
    ops = {str(n) for n in tvm.ir.Op.list_op_names()}
    missing, listed_but_has = [], []
    for name in library.table():
        op = next((o for o in (f"relax.{name}", f"relax.nn.{name}") if o in ops), None)
        if op is None:
            continue  # a Python composition of other ops (linear, masked_fill, relu6)
        has = tvm.ir.Op.get(op).get_attr("FPrimalGradient") is not None
        if not has and name not in WITHOUT_GRADIENT:
            missing.append(name)
        if has and name in WITHOUT_GRADIENT:
            listed_but_has.append(name)
    assert not missing and not listed_but_has


def test_an_op_without_gradient_falls_back_to_torch_autograd_with_a_warning():
    @bt.jit
    def f(x):
        y = x * 2.0
        return R.cumprod(y, 1)

    x = rand(3, 4)
    with pytest.warns(GradientFallbackWarning, match=r"`cumprod`, which has no registered gradient at .*:\d+"):
        got = grads(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per function and construct
        again = grads(f, x)
    want = grads(lambda x: torch.cumprod(x * 2, 1), x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(again[0], want[0])


# --------------------------------------------------------------------------------------------------
# GPU (run by the lead on the GPU machine)
# --------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_gradcheck_layer_norm_and_softmax():
    ln = bt.jit(target="gpu")(layer_norm_by_hand.fn)
    sm = bt.jit(target="gpu")(softmax_by_hand.fn)
    gradcheck(ln, rand(4, 8).cuda(), rand(8).cuda(), rand(8).cuda())
    gradcheck(sm, rand(3, 5).cuda())
    gradcheck(bt.jit(target="gpu")(attention.fn), rand(2, 4, 3).cuda(), rand(2, 5, 3).cuda(), rand(2, 5, 2).cuda())


@pytest.mark.gpu
def test_gpu_kinks_ties_and_nan_match_torch():
    gpu = bt.jit(target="gpu")(kinks.fn)
    # not bit-exact: CUDA contracts a * b + c into one rounding (an ulp off torch's); a tie's 0.5 against 1,
    # or a kink's 0 against 1, is still far outside float64's default tolerance
    same_grads(gpu, torch_kinks, EDGES.cuda(), OTHER.cuda(), exact=False)


def test_an_integer_op_without_gradient_on_the_way_needs_none():
    """An integer sort or cumprod makes no gradient to miss: the backward is still compiled."""
    @bt.jit
    def f(x):
        ranks = R.sort(x.astype("int64"), 1)
        return R.cumprod(ranks, 1).astype("float64") + x * ranks.astype("float64")

    x = t([[3.5, 1.25, 2.0], [-1.5, 4.0, 0.5]])
    same_grads(f, lambda x: torch.cumprod(torch.sort(x.to(torch.int64), 1).values, 1).to(f64)
               + x * torch.sort(x.to(torch.int64), 1).values.to(f64), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_backwards_are_as_close_to_exact_as_torchs(dtype):
    """float16 and bfloat16 inputs (bfloat16 enters Gradient as float32: TVM differentiates only
    what it calls floating point): the error against float64 is torch's own, within a factor 2."""
    def torch_ln(x, w, b):
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt((centred * centred).mean(-1, keepdim=True) + 1e-5) * w + b

    x, w, b = torch.randn(16, 256), torch.randn(256), torch.randn(256)
    exact = grads(torch_ln, *(a.double() for a in (x, w, b)))
    got = grads(layer_norm_by_hand, *(a.to(dtype) for a in (x, w, b)))
    want = grads(torch_ln, *(a.to(dtype) for a in (x, w, b)))
    for g, r, e in zip(got, want, exact):
        assert g.dtype == dtype
        scale = e.abs().max()
        assert (g.double() - e).abs().max() / scale <= 2 * (r.double() - e).abs().max() / scale + 1e-3
    # a half product is computed in float32 on the CPU: so are the products of its gradient
    a, b = torch.randn(2, 3, 64), torch.randn(64, 5)
    exact = grads(torch.matmul, a.double(), b.double())
    got = grads(product, a.to(dtype), b.to(dtype))
    want = grads(torch.matmul, a.to(dtype), b.to(dtype))
    for g, r, e in zip(got, want, exact):
        assert g.dtype == dtype
        assert (g.double() - e).abs().max() <= 2 * (r.double() - e).abs().max() + 1e-3 * e.abs().max()


def _lookups(w, idx, j):
    return F.embedding(idx, w) * 2.0, w[idx], w[:, j], torch.take(w, idx)


@settings(max_examples=6, deadline=None)
@given(shape=st.sampled_from([(), (5,), (2, 8), (3, 2, 4)]), negative=st.booleans())
def test_take_with_indices_of_any_rank_matches_torch(shape, negative):
    """TVM's take_backward read its indices as a vector (an embedding's (batch, seq) indices failed
    to compile): their axes merge into one. Repeated and negative indices add up as torch's do."""
    w = torch.randn(10, 6, dtype=f64, requires_grad=True)
    idx, j = torch.randint(0, 10, shape), torch.randint(-6 if negative else 0, 6, (2, 3))
    weights = [torch.randn(o.shape, dtype=f64) for o in _lookups(w, idx, j)]
    sum((o * c).sum() for o, c in zip(bt.jit(target="cpu")(_lookups)(w, idx, j), weights)).backward()
    got, w.grad = w.grad, None
    sum((o * c).sum() for o, c in zip(_lookups(w, idx, j), weights)).backward()
    torch.testing.assert_close(got, w.grad)


def test_gpu_embedding_backward_builds():
    """The corpus' nanoGPT embedding backward, built for sm_90 (no GPU needed): nvcc takes its source."""
    import shutil
    from tvm.support import nvcc
    w, idx = torch.randn(50, 64, requires_grad=True), torch.randint(0, 50, (2, 8))
    k = bt.jit(target="gpu")(_lookups).backward(w, idx, torch.randint(0, 6, (3,)))
    if shutil.which("nvcc"):
        with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")
