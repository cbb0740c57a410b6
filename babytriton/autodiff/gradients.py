"""The gradients of Relax ops that TVM 0.27 lacks, or computes unlike torch: registered as each op's
`FPrimalGradient` (what relax.transform.Gradient calls), so that a backward agrees with torch's.

A rule gets the forward's binding (`y`, the call `call`), the gradient of its result `g` and a
BlockBuilder, and returns one partial per argument of the call: a Relax expression (written with
Relax ops, like TVM's relax/op/_op_gradient.py) or `no_grad(arg)`. The formulas are torch's
(tools/autograd/derivatives.yaml), including its choices where the derivative is undefined: ties
share a max's gradient, abs'(0) = relu'(0) = 0, clamp passes the gradient at its bounds, pow's
exponent has none where the base is 0. Ops whose torch counterparts have no gradient (comparisons,
argmax, bool and integer results, rounding) give `no_grad`. An op left out here (a convolution other
than conv2d, cumprod, ...) makes the backward fall back to torch autograd over the eager reference
(autograd.py), as backward.check finds it; a rule that covers only some forms of its op (einsum
without ellipses, constant pads) `decline`s the others, with the same fallback.
"""
from __future__ import annotations

import math
import threading

from tvm import relax
from tvm.relax.op import _op_gradient as tvm_rules
from tvm.relax.op.base import register_gradient
from tvm.relax.op.grad import no_grad

from ..core.types import is_float_dtype

op = relax.op
OURS = 20  # above TVM's level 10: our rule replaces TVM's where both exist


def _rule(*names: str):
    def register(fn):
        for name in names:
            register_gradient(name, fn, level=OURS)
        return fn
    return register


def _dtype(e) -> str:
    return tvm_rules._get_dtype(e)


def _shape(e) -> list[int]:
    return [int(s) for s in tvm_rules._get_shape(e)]


def _c(value, like) -> relax.Constant:
    return relax.const(value, _dtype(like))


def _fit(ctx, grad, x):
    """`grad` summed back to x's shape where x was broadcast."""
    return tvm_rules._fit_shape(ctx, grad, x)


def _axes(call, ndim: int) -> list[int]:
    """The reduced axes of a reduction call, non-negative (None: every axis)."""
    axis = call.attrs.axis
    return list(range(ndim)) if axis is None else sorted(int(a) % max(ndim, 1) for a in axis)


def _kept(value, call, ndim: int):
    """A reduction's result (or a value of its shape, e.g. its gradient) with the reduced axes back
    as size 1, for an input of `ndim` axes."""
    if call.attrs.keepdims or not ndim:
        return value
    return op.expand_dims(value, _axes(call, ndim))


def _no_grads(call) -> list:
    return [no_grad(a) for a in call.args]


_declined = threading.local()
_device = threading.local()   # the device kind the backward being built runs on (`on_device`)


class on_device:
    """`with gradients.on_device("cuda"):` around Gradient: rules whose torch formula differs by
    device (selu's at NaN) follow the kernels of the device the backward is built for."""

    def __init__(self, kind: str):
        self.kind = kind

    def __enter__(self):
        self.outer, _device.kind = getattr(_device, "kind", "cpu"), self.kind

    def __exit__(self, *exc):
        _device.kind = self.outer


class Declined(Exception):
    """A rule met a case it does not cover (see `decline`)."""


def decline(y, call, what: str):
    """Give up on the gradient of the binding `y = call` (a form of the op the rule does not cover):
    Gradient fails, and backward.vjp_module turns that into NotDifferentiable naming `what` at y's line."""
    _declined.last = (y.name, call.op.name, what)
    raise Declined(what)


def take_declined() -> tuple[str, str, str] | None:
    """The (binding name, op name, reason) of the last `decline` in this thread, once."""
    last = getattr(_declined, "last", None)
    _declined.last = None
    return last


# --------------------------------------------------------------------------------------------------
# not differentiable in torch: bool and integer results, and the rounding ops (zero derivative)
# --------------------------------------------------------------------------------------------------
NOT_DIFFERENTIABLE = [
    "relax.isnan", "relax.isinf", "relax.isfinite", "relax.argmax", "relax.argmin", "relax.argsort",
    "relax.logical_and", "relax.logical_or", "relax.logical_xor", "relax.logical_not",
    "relax.bitwise_and", "relax.bitwise_or", "relax.bitwise_xor", "relax.bitwise_not",
    "relax.left_shift", "relax.right_shift", "relax.bucketize", "relax.one_hot",
    "relax.floor", "relax.ceil", "relax.round", "relax.trunc", "relax.sign",
    "relax.arange", "relax.eye", "relax.eye_like", "relax.tril_indices", "relax.hamming_window",
]


@_rule(*NOT_DIFFERENTIABLE)
def _not_differentiable(y, call, g, ctx):
    return _no_grads(call)


@_rule("relax.grad.no_grad")   # the input of a max that only shifts a softmax (shifts.detach)
def _stopped(y, call, g, ctx):
    return _no_grads(call)


@_rule("relax.astype")
def _astype(y, call, g, ctx):
    # torch: a conversion to or from an integer or bool dtype carries no gradient (TVM casts it back)
    x = call.args[0]
    if not (is_float_dtype(_dtype(x)) and is_float_dtype(_dtype(y))):
        return [no_grad(x)]
    return [op.astype(g, _dtype(x))]


# --------------------------------------------------------------------------------------------------
# element-wise, one operand
# --------------------------------------------------------------------------------------------------
@_rule("relax.abs")
def _abs(y, call, g, ctx):
    # torch: g * sgn(x), so abs'(0) = 0 (TVM's rule gives 1) and abs'(nan) = 0
    x = call.args[0]
    return [g * op.where(op.greater(x, _c(0, x)), _c(1, x), op.where(op.less(x, _c(0, x)), _c(-1, x), _c(0, x)))]


@_rule("relax.nn.relu")
def _relu(y, call, g, ctx):
    # torch: threshold_backward on the result, so relu'(0) = 0 (TVM's passes the gradient at 0)
    return [op.where(op.less_equal(y, _c(0, y)), _c(0, g), g)]


@_rule("relax.clip")
def _clip(y, call, g, ctx):
    """torch.clamp: the gradient passes where min <= x <= max, bounds included (NaN: none)."""
    x, lo, hi = call.args
    inside = op.logical_and(op.greater_equal(x, relax.const(float(lo.value), _dtype(x))),
                            op.less_equal(x, relax.const(float(hi.value), _dtype(x))))
    return [op.where(inside, g, _c(0, g)), no_grad(lo), no_grad(hi)]


@_rule("relax.where")
def _where(y, call, g, ctx):
    """torch.where: each side gets the gradient where the condition picks it, summed back to its own
    shape where it was broadcast (TVM's rule gives it the result's shape: `y[:, 0] = ...` failed)."""
    cond, x1, x2 = call.args
    return [no_grad(cond), _fit(ctx, op.where(cond, g, _c(0, g)), x1), _fit(ctx, op.where(cond, _c(0, g), g), x2)]


@_rule("relax.square")
def _square(y, call, g, ctx):
    x = call.args[0]
    return [g * (_c(2, x) * x)]


@_rule("relax.rsqrt")
def _rsqrt(y, call, g, ctx):
    return [_c(-0.5, y) * g * (y * y * y)]


@_rule("relax.tan")
def _tan(y, call, g, ctx):
    return [g * (_c(1, y) + y * y)]


@_rule("relax.sinh")
def _sinh(y, call, g, ctx):
    return [g * op.cosh(call.args[0])]


@_rule("relax.cosh")
def _cosh(y, call, g, ctx):
    return [g * op.sinh(call.args[0])]


@_rule("relax.asin")
def _asin(y, call, g, ctx):
    x = call.args[0]
    return [g * op.rsqrt(_c(1, x) - x * x)]


@_rule("relax.acos")
def _acos(y, call, g, ctx):
    x = call.args[0]
    return [-(g * op.rsqrt(_c(1, x) - x * x))]


@_rule("relax.atan")
def _atan(y, call, g, ctx):
    x = call.args[0]
    return [g / (x * x + _c(1, x))]


@_rule("relax.asinh")
def _asinh(y, call, g, ctx):
    x = call.args[0]
    return [g * op.rsqrt(x * x + _c(1, x))]


@_rule("relax.acosh")
def _acosh(y, call, g, ctx):
    x = call.args[0]
    return [g * op.rsqrt(x * x - _c(1, x))]


@_rule("relax.atanh")
def _atanh(y, call, g, ctx):
    x = call.args[0]
    return [g / (_c(1, x) - x * x)]


@_rule("relax.erf")
def _erf(y, call, g, ctx):
    x = call.args[0]
    return [g * (_c(2 / math.sqrt(math.pi), x) * op.exp(-(x * x)))]


@_rule("relax.nn.gelu")
def _gelu(y, call, g, ctx):
    """torch's gelu_backward: g * (cdf(x) + x * pdf(x))."""
    x = call.args[0]
    cdf = _c(0.5, x) * (_c(1, x) + op.erf(x * _c(math.sqrt(0.5), x)))
    pdf = op.exp(_c(-0.5, x) * (x * x)) * _c(1 / math.sqrt(2 * math.pi), x)
    return [g * (cdf + x * pdf)]


@_rule("relax.nn.gelu_tanh")
def _gelu_tanh(y, call, g, ctx):
    """torch's gelu_backward(approximate='tanh')."""
    x = call.args[0]
    beta, kappa = math.sqrt(2 / math.pi), 0.044715
    inner = _c(beta, x) * (x + _c(kappa, x) * (x * x * x))
    t = op.tanh(inner)
    left = _c(0.5, x) * x
    right = _c(1, x) + t
    dleft = _c(0.5, x) * right
    dright = left * (_c(1, x) - t * t) * (_c(beta, x) * (_c(1, x) + _c(3 * kappa, x) * (x * x)))
    return [g * (dleft + dright)]


@_rule("relax.nn.leakyrelu")
def _leakyrelu(y, call, g, ctx):
    # torch: x > 0 ? g : g * alpha (so alpha at 0 and at NaN)
    x = call.args[0]
    return [op.where(op.greater(x, _c(0, x)), g, g * _c(float(call.attrs.alpha), g))]


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@_rule("relax.nn.selu")
def _selu(y, call, g, ctx):
    # torch's elu_backward: x > 0 ? g * scale : g * scale * alpha * exp(x), so NaN where x is NaN.
    # That is its vectorised loop, which takes every element of a large tensor on any CPU; its scalar
    # loop (x <= 0 ? ... : g * scale) gives g * scale instead, but runs only on a short tail, whose
    # length depends on the vector width (all 12 of a 12-double tensor with AVX-512, 4 with AVX2).
    # A zero g stays zero: a result nothing differentiates comes here as zeros, where torch never
    # runs this rule, and must not put NaN into the other results' gradients.
    # torch's CUDA kernel tests x <= 0 instead (g * scale where x is NaN): followed on a GPU.
    x = call.args[0]
    negative = op.where(op.equal(g, _c(0, g)), g, g * _c(SELU_SCALE * SELU_ALPHA, x) * op.exp(x))
    if getattr(_device, "kind", "cpu") == "cuda":
        return [op.where(op.less_equal(x, _c(0, x)), negative, g * _c(SELU_SCALE, x))]
    return [op.where(op.greater(x, _c(0, x)), g * _c(SELU_SCALE, x), negative)]


@_rule("relax.nn.softplus")
def _softplus(y, call, g, ctx):
    # torch: x * beta > threshold ? g : g * z / (z + 1), z = exp(x * beta)
    x = call.args[0]
    beta, threshold = float(call.attrs.beta), float(call.attrs.threshold)
    scaled = x * _c(beta, x)
    z = op.exp(scaled)
    return [op.where(op.greater(scaled, _c(threshold, x)), g, g * z / (z + _c(1, x)))]


# --------------------------------------------------------------------------------------------------
# element-wise, two or three operands
# --------------------------------------------------------------------------------------------------
def _split_at_ties(x1, x2, g, keep1, keep2):
    """torch's maximum/minimum rule: the gradient goes to the operand chosen, halved at ties (each
    operand gets half); a NaN passes it to both."""
    half = op.where(op.equal(x1, x2), g / _c(2, g), g)
    return op.where(keep1, half, _c(0, g)), op.where(keep2, half, _c(0, g))


@_rule("relax.maximum")
def _maximum(y, call, g, ctx):
    # torch splits the gradient equally at ties (TVM's rule gives all of it to x2)
    x1, x2 = call.args
    d1, d2 = _split_at_ties(x1, x2, g, op.logical_not(op.less(x1, x2)), op.logical_not(op.greater(x1, x2)))
    return [_fit(ctx, d1, x1), _fit(ctx, d2, x2)]


@_rule("relax.minimum")
def _minimum(y, call, g, ctx):
    # torch splits the gradient equally at ties (TVM's rule gives all of it to x2)
    x1, x2 = call.args
    d1, d2 = _split_at_ties(x1, x2, g, op.logical_not(op.greater(x1, x2)), op.logical_not(op.less(x1, x2)))
    return [_fit(ctx, d1, x1), _fit(ctx, d2, x2)]


@_rule("relax.power")
def _power(y, call, g, ctx):
    # torch: d/dx is 0 where the exponent is 0 (TVM's gives 0 * 0**-1 = NaN at x = 0); d/dexponent
    # is 0 where x == 0 and the exponent >= 0 (TVM's gives 0 * log(0) = NaN)
    x, e = call.args
    zero = _c(0, g)
    dx = op.where(op.equal(e, _c(0, e)), zero, g * (e * op.power(x, e - _c(1, e))))
    at_zero = op.logical_and(op.equal(x, _c(0, x)), op.greater_equal(e, _c(0, e)))
    de = op.where(at_zero, zero, g * (y * op.log(x)))
    return [_fit(ctx, dx, x), _fit(ctx, de, e)]


@_rule("relax.atan2")
def _atan2(y, call, g, ctx):
    a, b = call.args
    recip = _c(1, a) / (a * a + b * b)
    return [_fit(ctx, g * b * recip, a), _fit(ctx, g * -a * recip, b)]


@_rule("relax.log_add_exp")
def _log_add_exp(y, call, g, ctx):
    a, b = call.args
    one = _c(1, a)
    return [_fit(ctx, g / (one + op.exp(b - a)), a), _fit(ctx, g / (one + op.exp(a - b)), b)]


@_rule("relax.floor_mod")
def _floor_mod(y, call, g, ctx):
    """torch.remainder: a - floor(a / b) * b."""
    a, b = call.args
    return [_fit(ctx, g, a), _fit(ctx, -g * op.floor(a / b), b)]


@_rule("relax.mod")
def _mod(y, call, g, ctx):
    """torch.fmod: a - trunc(a / b) * b."""
    a, b = call.args
    return [_fit(ctx, g, a), _fit(ctx, -g * op.trunc(a / b), b)]


@_rule("relax.ewise_fma")
def _ewise_fma(y, call, g, ctx):
    a, b, c = call.args
    return [_fit(ctx, g * b, a), _fit(ctx, g * a, b), _fit(ctx, g, c)]


@_rule("relax.matmul")
def _matmul(y, call, g, ctx):
    # a half product computed in float32 (`out_dtype`, the codegen's CPU form) has a float32 gradient,
    # which TVM's rule multiplies with the half operands (refused): the products are taken in float32
    # too, then rounded once to the operands' dtype, as torch accumulates half products
    a, b = call.args
    wide = _dtype(g)
    if _dtype(a) == _dtype(b) == wide:
        return tvm_rules.matmul_grad(y, call, g, ctx)
    wide_call = ctx.normalize(op.matmul(ctx.emit(op.astype(a, wide)), ctx.emit(op.astype(b, wide))))
    da, db = tvm_rules.matmul_grad(y, wide_call, g, ctx)
    return [op.astype(da, _dtype(a)), op.astype(db, _dtype(b))]


@_rule("relax.outer")
def _outer(y, call, g, ctx):
    a, b = call.args
    return [op.matmul(g, b), op.matmul(a, g)]


# --------------------------------------------------------------------------------------------------
# reductions and scans
# --------------------------------------------------------------------------------------------------
@_rule("relax.max", "relax.min")
def _extreme(y, call, g, ctx):
    # torch.amax/amin: the gradient is shared evenly among the elements equal to the result (a
    # row holding NaN gets NaN everywhere, as torch's count of 0 gives)
    x = call.args[0]
    ndim = x.ty.ndim
    mask = op.astype(op.equal(x, _kept(y, call, ndim)), _dtype(g))
    count = op.sum(mask, _axes(call, ndim) if ndim else None, keepdims=True)
    return [_kept(g, call, ndim) / count * mask]


@_rule("relax.std")
def _std(y, call, g, ctx):
    # torch's std_backward: var_backward of g / (2 std), which is 0 where std is 0
    x = call.args[0]
    ndim = x.ty.ndim
    axes = _axes(call, ndim)
    n = math.prod(_shape(x)[a] for a in axes)
    scaled = op.where(op.equal(y, _c(0, y)), _c(0, g), g / (_c(2, y) * y))
    centred = x - op.mean(x, axes, keepdims=True)
    return [_c(2 / n if n else math.nan, x) * _kept(scaled, call, ndim) * centred]


@_rule("relax.prod")
def _prod(y, call, g, ctx):
    """The product of the other elements, computed without dividing (right where x has zeros, as
    torch's prod_backward is): exclusive cumulative products from both ends of the reduced axes."""
    x = call.args[0]
    ndim, shape = x.ty.ndim, _shape(x)
    if not math.prod(shape):
        return [op.zeros(x.ty.shape, _dtype(x))]
    axes = _axes(call, ndim) if ndim else []
    order = [a for a in range(ndim) if a not in axes] + axes  # the reduced axes last, merged into one
    moved = op.permute_dims(x, order) if order != list(range(ndim)) else x
    keep = [shape[a] for a in order[:ndim - len(axes)]]
    flat = op.reshape(moved, keep + [math.prod(shape[a] for a in axes)])
    before = op.cumprod(flat, axis=len(keep), exclusive=True)
    after = op.flip(op.cumprod(op.flip(flat, len(keep)), axis=len(keep), exclusive=True), len(keep))
    others = op.reshape(before * after, [shape[a] for a in order])
    if order != list(range(ndim)):
        others = op.permute_dims(others, [order.index(a) for a in range(ndim)])
    return [_kept(g, call, ndim) * others]


@_rule("relax.cumsum")
def _cumsum(y, call, g, ctx):
    # the reversed (exclusive where the forward was) cumulative sum; TVM's sum - cumsum + g rule
    # cancels digits and ignores `exclusive`
    x = call.args[0]
    shape = _shape(x)
    if not math.prod(shape):
        return [op.zeros(x.ty.shape, _dtype(x))]
    flat = call.attrs.axis is None
    grad = op.reshape(g, [-1]) if flat else g
    axis = 0 if flat else int(call.attrs.axis) % len(shape)
    grad = op.flip(op.cumsum(op.flip(grad, axis), axis, exclusive=bool(call.attrs.exclusive)), axis)
    if flat:
        grad = op.reshape(grad, shape)
    return [grad if call.attrs.dtype is None else op.astype(grad, _dtype(x))]


# --------------------------------------------------------------------------------------------------
# shapes and data movement
# --------------------------------------------------------------------------------------------------
@_rule("relax.triu", "relax.tril")
def _triangle(y, call, g, ctx):
    # TVM's triu rule returns no partial for `k`, which Gradient refuses
    k = call.args[1]
    fn = op.triu if call.op.name == "relax.triu" else op.tril
    return [fn(g, k), no_grad(k)]


@_rule("relax.concat")
def _concat(y, call, g, ctx):
    # each operand's part of g, sliced; an empty operand's is empty (TVM's rule splits g at the
    # operands' offsets, which fails to build where an operand is empty, as the scans' padding is)
    axis = int(call.attrs.axis) % y.ty.ndim
    parts, start = [], 0
    for field in call.args[0].ty.fields:
        shape = [int(s) for s in field.shape]
        if not math.prod(shape):
            parts.append(op.zeros(shape, field.dtype))
        else:
            parts.append(op.strided_slice(g, [axis], [start], [start + shape[axis]]))
        start += shape[axis]
    return [relax.Tuple(parts)]


@_rule("relax.squeeze", "relax.flatten")
def _squeeze(y, call, g, ctx):
    return [op.reshape(g, call.args[0].ty.shape)]


@_rule("relax.stack")
def _stack(y, call, g, ctx):
    parts = call.args[0].ty.fields
    axis = int(call.attrs.axis) % y.ty.ndim
    pieces = ctx.emit(op.split(g, len(parts), axis))
    return [relax.Tuple([op.squeeze(relax.TupleGetItem(pieces, i), [axis]) for i in range(len(parts))])]


@_rule("relax.flip")
def _flip(y, call, g, ctx):
    return [op.flip(g, int(call.attrs.axis))]


@_rule("relax.tile")
def _tile(y, call, g, ctx):
    """Sum the tiles: the result read as (repeat, size) pairs per axis, summed over the repeats."""
    x = call.args[0]
    shape, repeats = _shape(x), [int(r) for r in call.attrs.repeats]
    ndim = max(len(shape), len(repeats))
    shape = [1] * (ndim - len(shape)) + shape
    repeats = [1] * (ndim - len(repeats)) + repeats
    pairs = op.reshape(g, [n for r, s in zip(repeats, shape) for n in (r, s)])
    summed = op.sum(pairs, list(range(0, 2 * ndim, 2)))
    return [op.reshape(summed, x.ty.shape)]


@_rule("relax.repeat")
def _repeat(y, call, g, ctx):
    """Sum each element's copies: the axis read as (size, repeats), summed over the repeats."""
    x = call.args[0]
    shape, repeats = _shape(x), int(call.attrs.repeats)
    if call.attrs.axis is None:
        summed = op.sum(op.reshape(g, [math.prod(shape), repeats]), [1])
    else:
        axis = int(call.attrs.axis) % len(shape)
        split = shape[:axis] + [shape[axis], repeats] + shape[axis + 1:]
        summed = op.sum(op.reshape(g, split), [axis + 1])
    return [op.reshape(summed, x.ty.shape)]


@_rule("relax.gather_elements")
def _gather_elements(y, call, g, ctx):
    # torch's gather backward: zeros scatter-added at the indices
    x, indices = call.args
    axis = int(call.attrs.axis) % x.ty.ndim
    shape = _shape(x)
    if _shape(indices)[axis] == 1 and all(isinstance(n, int) for n in shape):
        # one pick per row (a cross-entropy's target): the gradient where the index is, else 0; element-wise,
        # so it fuses into the row's kernel (a scatter is a kernel of its own, serial on a GPU)
        n = shape[axis]
        places = op.reshape(op.arange(0, n, 1, str(indices.ty.dtype)), [n if a == axis else 1 for a in range(len(shape))])
        wrapped = op.where(op.less(indices, _c(0, indices)), indices + _c(n, indices), indices)
        return [op.where(op.equal(places, wrapped), g, _c(0, g)), no_grad(indices)]
    zeros = op.zeros(x.ty.shape, _dtype(g))
    return [op.scatter_elements(zeros, indices, g, int(call.attrs.axis), reduction="add"), no_grad(indices)]


# the indices a take read, out-of-range ones brought into x by its mode ("fast" trusts them)
_TAKE_MODES = {
    "clip": lambda i, n, dtype: op.clip(i, 0, n - 1),
    "wrap": lambda i, n, dtype: op.floor_mod(i, relax.const(n, dtype)),
}


@_rule("relax.take")
def _take(y, call, g, ctx):
    # TVM's take_backward reads its indices as a vector (it asserted on an embedding's (batch, seq)
    # indices): their axes merge into one, in g too, then the one-index rule adds g's rows into x's
    x, indices = call.args
    flat = op.reshape(indices, [-1])
    if call.attrs.axis is None:  # a take from the flattened x
        n, rows = math.prod(_shape(x)), [-1]
    else:
        axis = int(call.attrs.axis) % x.ty.ndim
        shape = _shape(g)   # a backward has static sizes
        n, rows = _shape(x)[axis], shape[:axis] + [-1] + shape[axis + indices.ty.ndim:]
    flat = _TAKE_MODES.get(str(call.attrs.mode), lambda i, n, dtype: i)(flat, n, _dtype(indices))
    return [op.grad.take_backward(op.reshape(g, rows), x, flat, call.attrs.axis), no_grad(indices)]


@_rule("relax.strided_slice")
def _strided_slice(y, call, g, ctx):
    """The gradient put back where the slice read: per sliced axis, every `stride`-th place from
    `begin` (zeros between: the gradient interleaved with zero blocks), padded to the input's size."""
    x = call.args[0]
    shape = _shape(x)
    axes, begins, ends = ([int(v) for v in a] for a in call.args[1:4])
    strides = [int(v) for v in call.args[4]] if len(call.args) > 4 else [1] * len(axes)
    grad = g
    for axis, begin, end, stride in zip(axes, begins, ends, strides):
        axis %= len(shape)
        size = shape[axis]
        picked = range(*slice(begin, end, stride).indices(size))
        count = len(picked)
        cur = list(_shape_of(ctx, grad))
        if count == 0:
            grad = op.zeros(cur[:axis] + [size] + cur[axis + 1:], _dtype(g))
            continue
        if stride < 0:  # read backwards: the same places, read forwards
            grad = op.flip(grad, axis)
            picked = picked[::-1]
            stride = -stride
        first = picked[0]
        if stride > 1:  # (count, 1) blocks of the gradient, each followed by stride - 1 zeros
            blocks = op.expand_dims(grad, axis + 1)
            zeros = op.zeros(cur[:axis] + [count, stride - 1] + cur[axis + 1:], _dtype(g))
            grad = op.reshape(op.concat([blocks, zeros], axis + 1), cur[:axis] + [count * stride] + cur[axis + 1:])
            grad = op.strided_slice(grad, [axis], [0], [(count - 1) * stride + 1])
        after = size - first - ((count - 1) * stride + 1)
        width = [0] * (2 * len(cur))
        width[2 * axis], width[2 * axis + 1] = first, after
        grad = op.nn.pad(grad, width)
    return [grad] + [no_grad(a) for a in call.args[1:]]


def _shape_of(ctx, expr) -> list[int]:
    return [int(s) for s in ctx.normalize(expr).ty.shape]


# --------------------------------------------------------------------------------------------------
# normalisations (float32 and half only in babytriton, so checked against torch, not gradcheck)
# --------------------------------------------------------------------------------------------------
def _norm_axes(x, axes) -> tuple[list[int], list[int]]:
    """The normalised axes (non-negative) and the shape a weight over them broadcasts from."""
    ndim, shape = x.ty.ndim, _shape(x)
    axes = sorted(int(a) % ndim for a in axes)
    return axes, [shape[a] if a in axes else 1 for a in range(ndim)]


def _weight_grad(ctx, grad, weight, axes, ndim):
    """A weight's gradient: summed over the axes it is broadcast along, in the weight's shape."""
    rest = [a for a in range(ndim) if a not in axes]
    summed = op.sum(grad, rest) if rest else grad
    return op.reshape(summed, weight.ty.shape)


@_rule("relax.nn.layer_norm")
def _layer_norm(y, call, g, ctx):
    x, gamma, beta = call.args
    attrs = call.attrs
    axes, wshape = _norm_axes(x, attrs.axes)
    n = _c(math.prod(_shape(x)[a] for a in axes), x)
    mean = op.mean(x, axes, keepdims=True)
    centred = x - mean
    rstd = op.rsqrt(op.mean(centred * centred, axes, keepdims=True) + _c(float(attrs.epsilon), x))
    xhat = centred * rstd
    dxhat = g * op.reshape(gamma, wshape) if attrs.scale else g
    dx = rstd / n * (n * dxhat - op.sum(dxhat, axes, keepdims=True)
                     - xhat * op.sum(dxhat * xhat, axes, keepdims=True))
    ndim = x.ty.ndim
    dgamma = _weight_grad(ctx, g * xhat, gamma, axes, ndim) if attrs.scale else no_grad(gamma)
    dbeta = _weight_grad(ctx, g, beta, axes, ndim) if attrs.center else no_grad(beta)
    return [dx, dgamma, dbeta]


def _grouped_norm(x, gamma, beta, g, groups: int, channel_axis: int, axes, epsilon: float, center, scale):
    """group_norm / instance_norm: the channel axis split into (groups, channels per group), then
    layer_norm's gradient over the group's channels and `axes`; gamma and beta are per channel."""
    ndim, shape = x.ty.ndim, _shape(x)
    c = channel_axis % ndim
    split = shape[:c] + [groups, shape[c] // groups] + shape[c + 1:]
    normalised = sorted({c + 1} | {a % ndim + (a % ndim > c) for a in axes})
    xs, gs = op.reshape(x, split), op.reshape(g, split)
    n = _c(math.prod(split[a] for a in normalised), x)
    centred = xs - op.mean(xs, normalised, keepdims=True)
    rstd = op.rsqrt(op.mean(centred * centred, normalised, keepdims=True) + _c(epsilon, x))
    xhat = centred * rstd
    dxhat = gs * op.reshape(gamma, [1] * c + split[c:c + 2] + [1] * (ndim - c - 1)) if scale else gs
    dx = rstd / n * (n * dxhat - op.sum(dxhat, normalised, keepdims=True)
                     - xhat * op.sum(dxhat * xhat, normalised, keepdims=True))
    rest = [a for a in range(ndim) if a != c]
    dgamma = op.reshape(op.sum(g * op.reshape(xhat, shape), rest), gamma.ty.shape) if scale else no_grad(gamma)
    dbeta = op.reshape(op.sum(g, rest), beta.ty.shape) if center else no_grad(beta)
    return [op.reshape(dx, shape), dgamma, dbeta]


@_rule("relax.nn.group_norm")
def _group_norm(y, call, g, ctx):
    a = call.attrs
    return _grouped_norm(*call.args, g, int(a.num_groups), int(a.channel_axis), [int(v) for v in a.axes],
                         float(a.epsilon), a.center, a.scale)


@_rule("relax.nn.instance_norm")
def _instance_norm(y, call, g, ctx):
    a = call.attrs
    x = call.args[0]
    channels = _shape(x)[int(a.channel_axis) % x.ty.ndim]
    return _grouped_norm(*call.args, g, channels, int(a.channel_axis), [int(v) for v in a.axes],
                         float(a.epsilon), a.center, a.scale)


@_rule("relax.nn.rms_norm")
def _rms_norm(y, call, g, ctx):
    x, weight = call.args
    axes, wshape = _norm_axes(x, call.attrs.axes)
    rstd = op.rsqrt(op.mean(x * x, axes, keepdims=True) + _c(float(call.attrs.epsilon), x))
    xhat = x * rstd
    dxhat = g * op.reshape(weight, wshape)
    dx = rstd * (dxhat - xhat * op.mean(dxhat * xhat, axes, keepdims=True))
    return [dx, _weight_grad(ctx, g * xhat, weight, axes, x.ty.ndim)]


# --------------------------------------------------------------------------------------------------
# rules that cover some forms of their op and decline the others (the backward then falls back)
# --------------------------------------------------------------------------------------------------
@_rule("relax.einsum")
def _einsum(y, call, g, ctx):
    """Operand k's gradient is the einsum of g with the other operands into k's indices; an index
    only k has (summed inside it) is broadcast back."""
    operands = list(call.args[0].fields) if isinstance(call.args[0], relax.Tuple) else None
    text = str(call.attrs.subscripts).replace(" ", "")
    inputs, _, out = text.partition("->")
    subs = inputs.split(",")
    if not _:  # implicit output: the indices seen once, in alphabetical order
        out = "".join(sorted(c for c in set(inputs) - {","} if inputs.count(c) == 1))
    if operands is None or "." in text or any(len(set(s)) != len(s) for s in subs + [out]):
        decline(y, call, "`einsum` with an ellipsis, a repeated index or operands not written as a tuple "
                   "(its gradient is not compiled)")
    partials = []
    for k, (x, sub) in enumerate(zip(operands, subs)):
        others = [(o, s) for i, (o, s) in enumerate(zip(operands, subs)) if i != k]
        seen = set(out).union(*(set(s) for _, s in others))
        kept = "".join(c for c in sub if c in seen)
        if others:
            grad = op.einsum([g] + [o for o, _ in others], f"{','.join([out] + [s for _, s in others])}->{kept}")
        else:
            grad = op.permute_dims(g, [out.index(c) for c in kept]) if out != kept else g
        missing = [i for i, c in enumerate(sub) if c not in seen]
        if missing:
            grad = op.broadcast_to(op.expand_dims(grad, missing), x.ty.shape)
        partials.append(grad)
    return [relax.Tuple(partials)]


@_rule("relax.nn.pad")
def _pad(y, call, g, ctx):
    """A constant pad's gradient is the middle of g."""
    x = call.args[0]
    width = [int(w) for w in call.attrs.pad_width]
    if str(call.attrs.pad_mode) != "constant" or any(w < 0 for w in width):
        decline(y, call, f"`pad` in mode '{call.attrs.pad_mode}' (only the constant mode's gradient is compiled)")
    shape = _shape(x)
    begin = width[0::2][:len(shape)]
    return [op.strided_slice(g, list(range(len(shape))), begin, [b + n for b, n in zip(begin, shape)])]


@_rule("relax.scatter_elements")
def _scatter_elements(y, call, g, ctx):
    """torch's scatter / scatter_add: the data's gradient is g (less the places written over), the
    updates' is g gathered at the indices."""
    data, indices, updates = call.args
    axis, reduction = int(call.attrs.axis), str(call.attrs.reduction)
    if reduction not in ("update", "add"):
        decline(y, call, f"`scatter_elements` with reduction '{reduction}' (its gradient is not compiled)")
    kept = g if reduction == "add" else op.scatter_elements(g, indices, op.zeros_like(updates), axis)
    return [kept, no_grad(indices), op.gather_elements(g, indices, axis)]


@_rule("relax.slice_scatter")
def _slice_scatter(y, call, g, ctx):
    x, src, start, end, step = call.args
    axis = int(call.attrs.axis)
    kept = op.slice_scatter(g, op.zeros_like(src), start, end, step, axis)
    return [kept, op.strided_slice(g, [axis], [start], [end], [step]), no_grad(start), no_grad(end), no_grad(step)]


@_rule("relax.nn.prelu")
def _prelu(y, call, g, ctx):
    # torch: x > 0 ? g : alpha * g; alpha's gradient sums x * g where x <= 0 over the other axes
    x, alpha = call.args
    ndim, axis = x.ty.ndim, int(call.attrs.axis) % x.ty.ndim
    channels = math.prod(_shape(alpha))
    shape = [_shape(x)[a] if a == axis and channels > 1 else 1 for a in range(ndim)]
    positive = op.greater(x, _c(0, x))
    dx = op.where(positive, g, g * op.reshape(alpha, shape))
    summed = op.sum(op.where(positive, _c(0, g), x * g), [a for a in range(ndim) if a != axis or channels == 1])
    return [dx, op.reshape(summed, alpha.ty.shape)]


@_rule("relax.nn.batch_flatten")
def _batch_flatten(y, call, g, ctx):
    return [op.reshape(g, call.args[0].ty.shape)]


@_rule("relax.collapse_sum_to", "relax.collapse_sum_like")
def _collapse_sum(y, call, g, ctx):
    return [op.broadcast_to(g, call.args[0].ty.shape), no_grad(call.args[1])]
