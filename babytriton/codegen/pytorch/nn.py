"""torch.nn.functional's layers and losses, each written once over the library's Relax operators:
linear, norms, attention, embeddings and the losses (cross-entropy, NLL, MSE, KL, BCE, ...)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...core.errors import Diagnostic
from .registry import dim as axis_of, op, tensor, torch_rule

REDUCTIONS = ("mean", "sum", "none")


# ----------------------------------------------------------------------------------------------
# small pieces the rules share
# ----------------------------------------------------------------------------------------------
def _reduce(b, loss, reduction: str, where: str):
    """A loss's `reduction`: 'mean', 'sum' or 'none' (every element's loss)."""
    if reduction not in REDUCTIONS:
        raise Diagnostic(f"{where}: reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    return loss if reduction == "none" else op(b, reduction, loss)


def _trailing_axes(b, x, normalized_shape, where: str) -> list[int]:
    """The axes a layer/RMS norm over `normalized_shape` (the last sizes of x) normalises."""
    sizes = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    shape = b.shape(x)
    if not sizes or len(sizes) > len(shape) or any(
            isinstance(s, int) and isinstance(t, int) and s != t for s, t in zip(sizes, shape[len(shape) - len(sizes):])):
        raise Diagnostic(f"{where}: normalized_shape {tuple(sizes)} does not match the last sizes of "
                         f"{b.describe(x)}")
    return list(range(len(shape) - len(sizes), len(shape)))


def _as_float_number(b, x, value):
    """A Python number as a 0-d tensor of x's float dtype."""
    return b.const(value, b.dtype(x))


# ----------------------------------------------------------------------------------------------
# layers
# ----------------------------------------------------------------------------------------------
@torch_rule(F.linear, name="F.linear")
def linear(b, input, weight, bias=None):
    """`input @ weight.T + bias`, as `x @ w + b` is compiled (half products accumulate in float32)."""
    x, w = tensor(b, input, "F.linear()"), tensor(b, weight, "F.linear(): weight")
    wt = op(b, "permute_dims", w, None if b.ndim(w) == 2 else list(range(b.ndim(w)))[::-1])
    out = op(b, "matmul", x, wt)
    return out if bias is None else op(b, "add", out, tensor(b, bias, "F.linear(): bias"))


@torch_rule(F.layer_norm, name="F.layer_norm")
def layer_norm(b, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = tensor(b, input, "F.layer_norm()")
    axes = _trailing_axes(b, x, normalized_shape, "F.layer_norm()")
    shape = b.shape(x)[axes[0]:]
    gamma = weight if weight is not None else op(b, "ones", shape, b.dtype(x))
    beta = bias if bias is not None else op(b, "zeros", shape, b.dtype(x))
    return op(b, "layer_norm", x, gamma, beta, axes, float(eps), bias is not None, weight is not None)


@torch_rule(F.rms_norm, name="F.rms_norm")
def rms_norm(b, input, normalized_shape, weight=None, eps=None):
    """RMS norm; eps None is the dtype's machine epsilon, as torch's."""
    x = tensor(b, input, "F.rms_norm()")
    axes = _trailing_axes(b, x, normalized_shape, "F.rms_norm()")
    if eps is None:
        eps = torch.finfo(getattr(torch, b.dtype(x))).eps
    weight = weight if weight is not None else op(b, "ones", b.shape(x)[axes[0]:], b.dtype(x))
    return op(b, "rms_norm", x, weight, axes, float(eps))


@torch_rule(F.group_norm, name="F.group_norm")
def group_norm(b, input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise each group of channels (axis 1) over the group's channels and the spatial axes."""
    x = tensor(b, input, "F.group_norm()")
    shape = b.shape(x)
    if len(shape) < 2:
        raise Diagnostic(f"F.group_norm() expects at least a 2-d input (N, C, ...), got {b.describe(x)}")
    channels = shape[1]
    if isinstance(channels, int) and channels % num_groups:
        raise Diagnostic(f"F.group_norm(): {channels} channels cannot be split into {num_groups} groups")
    grouped = op(b, "reshape", x, (shape[0], num_groups, -1))
    mean = op(b, "mean", grouped, [2], True)
    centered = op(b, "subtract", grouped, mean)
    var = op(b, "mean", op(b, "multiply", centered, centered), [2], True)
    out = op(b, "reshape", op(b, "multiply", centered, op(b, "rsqrt", op(b, "add", var, float(eps)))), shape)
    affine = [1, channels] + [1] * (len(shape) - 2)
    if weight is not None:
        out = op(b, "multiply", out, op(b, "reshape", weight, affine))
    if bias is not None:
        out = op(b, "add", out, op(b, "reshape", bias, affine))
    return out


@torch_rule(F.batch_norm, name="F.batch_norm")
def batch_norm(b, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Inference batch norm (the running statistics); training mode would update them: refused."""
    if training:
        raise Diagnostic("F.batch_norm(training=True) updates the running statistics in place; in @jit code "
                         "use training=False (inference), or compute the batch statistics with x.mean / x.var")
    x = tensor(b, input, "F.batch_norm()")
    shape = [1, b.shape(x)[1]] + [1] * (b.ndim(x) - 2)
    scale = op(b, "rsqrt", op(b, "add", running_var, float(eps)))
    if weight is not None:
        scale = op(b, "multiply", scale, weight)
    shift = op(b, "negative", op(b, "multiply", running_mean, scale))
    if bias is not None:
        shift = op(b, "add", shift, bias)
    return op(b, "add", op(b, "multiply", x, op(b, "reshape", scale, shape)), op(b, "reshape", shift, shape))


@torch_rule(F.embedding, name="F.embedding")
def embedding(b, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    if max_norm is not None:
        raise Diagnostic("F.embedding(max_norm=...) renormalises the weight in place: not supported in @jit code")
    return op(b, "take", tensor(b, weight, "F.embedding(): weight"), tensor(b, input, "F.embedding()"), 0)


@torch_rule(F.dropout, name="F.dropout")
def dropout(b, input, p=0.5, training=True, inplace=False):
    """Dropout at inference (training=False, or p=0) is the input; @jit code has no random numbers."""
    if training and p:
        raise Diagnostic("F.dropout() with training=True draws random numbers, which @jit code cannot; pass "
                         "training=False (inference) or p=0.0")
    return tensor(b, input, "F.dropout()")


@torch_rule(F.normalize, name="F.normalize")
def normalize(b, input, p=2.0, dim=1, eps=1e-12, out=None):
    """x / max(‖x‖_p, eps) along `dim`."""
    x = tensor(b, input, "F.normalize()")
    axis = axis_of(b, x, dim, "F.normalize()")
    norm = _p_norm(b, x, p, axis)
    return op(b, "divide", x, op(b, "maximum", norm, _as_float_number(b, norm, eps)))


def _p_norm(b, x, p, axis: int):
    """‖x‖_p along `axis`, kept as a size-1 axis: 2 (sqrt of squares), 1, inf, or any other p."""
    if p == 2:
        return op(b, "sqrt", op(b, "sum", op(b, "multiply", x, x), [axis], True))
    magnitude = op(b, "abs", x)
    if p == 1:
        return op(b, "sum", magnitude, [axis], True)
    if p == math.inf:
        return op(b, "max", magnitude, [axis], True)
    powered = op(b, "sum", op(b, "power", magnitude, float(p)), [axis], True)
    return op(b, "power", powered, 1.0 / p)


@torch_rule(F.cosine_similarity, name="F.cosine_similarity")
def cosine_similarity(b, x1, x2, dim=1, eps=1e-8):
    """x1·x2 / (max(‖x1‖, eps) · max(‖x2‖, eps)) along `dim`, torch's formula."""
    x1, x2 = tensor(b, x1, "F.cosine_similarity()"), tensor(b, x2, "F.cosine_similarity()")
    ndim = max(b.ndim(x1), b.ndim(x2))
    axis = dim % ndim if -ndim <= dim < ndim else axis_of(b, x1, dim, "F.cosine_similarity()")
    n1 = op(b, "maximum", _p_norm(b, x1, 2, axis - ndim + b.ndim(x1)), float(eps))
    n2 = op(b, "maximum", _p_norm(b, x2, 2, axis - ndim + b.ndim(x2)), float(eps))
    dot = op(b, "sum", op(b, "multiply", op(b, "divide", x1, n1), op(b, "divide", x2, n2)), [axis])
    return dot


@torch_rule(F.scaled_dot_product_attention, name="F.scaled_dot_product_attention")
def scaled_dot_product_attention(b, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q @ kᵀ · scale + mask) @ v; a causal mask keeps key j ≤ query i (top-left aligned)."""
    where = "F.scaled_dot_product_attention()"
    q, k, v = (tensor(b, t, where) for t in (query, key, value))
    if dropout_p:
        raise Diagnostic(f"{where}: dropout_p={dropout_p} draws random numbers, which @jit code cannot")
    if enable_gqa:
        raise Diagnostic(f"{where}: enable_gqa=True is not supported; repeat the key/value heads first")
    if is_causal and attn_mask is not None:
        raise Diagnostic(f"{where}: is_causal=True and an attn_mask together are an error in torch too")
    d = b.shape(q)[-1]
    if scale is None:
        if not isinstance(d, int):
            raise Diagnostic(f"{where}: the head size is symbolic; pass scale= explicitly")
        scale = 1.0 / math.sqrt(d)
    kt = op(b, "permute_dims", k, list(range(b.ndim(k) - 2)) + [b.ndim(k) - 1, b.ndim(k) - 2])
    scores = op(b, "multiply", op(b, "matmul", q, kt), float(scale))
    if is_causal:
        length, keys = b.shape(q)[-2], b.shape(k)[-2]
        attn_mask = op(b, "tril", op(b, "ones", (length, keys), "bool"), 0)
    if attn_mask is not None:
        mask = tensor(b, attn_mask, where)
        if b.dtype(mask) == "bool":
            scores = op(b, "where", mask, scores, float("-inf"))
        else:
            scores = op(b, "add", scores, mask)
    return op(b, "matmul", op(b, "softmax", scores, -1), v)


@torch_rule(F.glu, name="F.glu")
def glu(b, input, dim=-1):
    """a * sigmoid(b) of the two halves of `dim`."""
    x = tensor(b, input, "F.glu()")
    axis = axis_of(b, x, dim, "F.glu()")
    size = b.shape(x)[axis]
    if isinstance(size, int) and size % 2:
        raise Diagnostic(f"F.glu(): halving dimension must be even, but dimension {axis} is size {size}")
    first, second = op(b, "split", x, 2, axis)
    return op(b, "multiply", first, op(b, "sigmoid", second))


@torch_rule(F.one_hot, name="F.one_hot")
def one_hot(b, tensor_, num_classes=-1):
    """int64 one-hot rows; the class count must be given (torch reads it from the data otherwise)."""
    x = tensor(b, tensor_, "F.one_hot()")
    if num_classes is None or isinstance(num_classes, int) and num_classes < 0:
        raise Diagnostic("F.one_hot() without num_classes reads the class count from the data, which @jit code "
                         "cannot; pass num_classes=")
    classes = op(b, "arange", 0, num_classes, 1, "int64")
    hits = op(b, "equal", op(b, "expand_dims", x, [-1]), classes)
    return op(b, "astype", hits, "int64")


# ----------------------------------------------------------------------------------------------
# losses
# ----------------------------------------------------------------------------------------------
def _class_picked(b, logp, target, ignore_index: int, where: str):
    """(logp at each target class along axis 1, the mask of targets that count, the safe targets)."""
    if b.dtype(target) not in ("int64", "int32", "int16", "int8", "uint8"):
        raise Diagnostic(f"{where}: class-index targets must be an integer tensor, got {b.describe(target)}")
    keep = op(b, "not_equal", target, ignore_index)
    safe = op(b, "where", keep, target, 0)
    picked = op(b, "gather_elements", logp, op(b, "expand_dims", op(b, "astype", safe, "int64"), [1]), 1)
    return op(b, "squeeze", picked, [1]), keep, safe


def _nll(b, logp, target, weight, ignore_index, reduction, where):
    """NLL of log-probabilities (N, C, ...) at integer targets (N, ...), torch's weighting and mean."""
    picked, keep, safe = _class_picked(b, logp, target, ignore_index, where)
    w = op(b, "astype", keep, b.dtype(logp)) if weight is None else \
        op(b, "where", keep, op(b, "take", weight, op(b, "astype", safe, "int64"), 0), 0.0)
    loss = op(b, "negative", op(b, "multiply", picked, w))
    if reduction == "mean":
        return op(b, "divide", op(b, "sum", loss), op(b, "sum", w))
    return _reduce(b, loss, reduction, where)


def _logp_2d(b, input, where):
    """Inputs (C,) are one sample: as (1, C)."""
    x = tensor(b, input, where)
    return op(b, "expand_dims", x, [0]) if b.ndim(x) == 1 else x


@torch_rule(F.nll_loss, name="F.nll_loss")
def nll_loss(b, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    _no_legacy(size_average, reduce, "F.nll_loss()")
    logp = _logp_2d(b, input, "F.nll_loss()")
    target = op(b, "expand_dims", target, [0]) if b.ndim(target) == 0 else target
    return _nll(b, logp, target, weight, ignore_index, reduction, "F.nll_loss()")


@torch_rule(F.cross_entropy, name="F.cross_entropy")
def cross_entropy(b, input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """log_softmax over axis 1, then NLL at class indices (or soft targets: probabilities); label
    smoothing mixes in the mean over classes as torch does."""
    where = "F.cross_entropy()"
    _no_legacy(size_average, reduce, where)
    logp = op(b, "log_softmax", _logp_2d(b, input, where), 1)
    target = tensor(b, target, where)
    if b.dtype(target) == b.dtype(input) or b.dtype(target).startswith(("float", "bfloat")):
        return _soft_cross_entropy(b, logp, target, weight, reduction, label_smoothing, where)
    target = op(b, "expand_dims", target, [0]) if b.ndim(target) == 0 else target
    if not label_smoothing:
        return _nll(b, logp, target, weight, ignore_index, reduction, where)
    if b.dtype(logp) == "float16":  # torch's own steps, each rounded: its sum over the classes overflows
        return _smoothed_nll_in_steps(b, logp, target, weight, ignore_index, reduction, label_smoothing, where)
    return _smoothed_nll(b, logp, target, weight, ignore_index, reduction, label_smoothing, where)


def _smoothed_nll_in_steps(b, logp, target, weight, ignore_index, reduction, label_smoothing, where):
    """Label-smoothed NLL as torch computes it: the NLL, and the mean over classes apart, mixed."""
    nll = _nll(b, logp, target, weight, ignore_index, reduction, where)
    classes = b.shape(logp)[1]
    _, keep, _ = _class_picked(b, logp, target, ignore_index, where)
    spread = logp if weight is None else op(b, "multiply", logp, _along_axis1(b, weight, logp))
    smooth = op(b, "where", keep, op(b, "negative", op(b, "sum", spread, [1])), 0.0)
    if reduction == "mean":
        if weight is None:
            smooth = op(b, "divide", op(b, "sum", smooth), op(b, "sum", op(b, "astype", keep, b.dtype(logp))))
        else:
            _, keep, safe = _class_picked(b, logp, target, ignore_index, where)
            picked_w = op(b, "where", keep, op(b, "take", weight, op(b, "astype", safe, "int64"), 0), 0.0)
            smooth = op(b, "divide", op(b, "sum", smooth), op(b, "sum", picked_w))
    else:
        smooth = _reduce(b, smooth, reduction, where)
    return op(b, "add", op(b, "multiply", nll, 1.0 - label_smoothing),
              op(b, "multiply", smooth, label_smoothing / classes))


def _smoothed_nll(b, logp, target, weight, ignore_index, reduction, label_smoothing, where):
    """Label-smoothed NLL at integer targets, torch's weighting and mean: each position's
    -sum_j q_j w_j logp_j with q = (1 - eps) at the target class plus eps / C, the target found by
    comparing class indices. One sum over the classes after the log-softmax (its row kernel reads
    logp once), where a gather of the target and a second sum each read logp written out. (float16
    keeps torch's steps: torch rounds its sum of logp over the classes, which overflows at large C.)"""
    if b.dtype(target) not in ("int64", "int32", "int16", "int8", "uint8"):
        raise Diagnostic(f"{where}: class-index targets must be an integer tensor, got {b.describe(target)}")
    classes, dtype = b.shape(logp)[1], b.dtype(logp)
    keep = op(b, "not_equal", target, ignore_index)
    safe = op(b, "astype", op(b, "where", keep, target, 0), "int64")
    index = op(b, "reshape", op(b, "arange", 0, classes, 1, "int64"), [1, -1] + [1] * (b.ndim(logp) - 2))
    hit = op(b, "astype", op(b, "equal", index, op(b, "expand_dims", safe, [1])), dtype)
    share = op(b, "add", op(b, "multiply", hit, 1.0 - label_smoothing), label_smoothing / classes)
    if weight is not None:
        share = op(b, "multiply", share, _along_axis1(b, weight, logp))
    loss = op(b, "where", keep, op(b, "negative", op(b, "sum", op(b, "multiply", logp, share), [1])), 0.0)
    if reduction != "mean":
        return _reduce(b, loss, reduction, where)
    counted = op(b, "astype", keep, dtype) if weight is None else \
        op(b, "where", keep, op(b, "take", weight, safe, 0), 0.0)
    return op(b, "divide", op(b, "sum", loss), op(b, "sum", counted))


def _soft_cross_entropy(b, logp, target, weight, reduction, label_smoothing, where):
    """Cross-entropy against class probabilities (a float target of the input's shape)."""
    classes = b.shape(logp)[1]
    if label_smoothing:
        target = op(b, "add", op(b, "multiply", target, 1.0 - label_smoothing), label_smoothing / classes)
    terms = op(b, "multiply", logp, target)
    if weight is not None:
        terms = op(b, "multiply", terms, _along_axis1(b, weight, logp))
    loss = op(b, "negative", op(b, "sum", terms, [1]))
    if reduction == "mean":
        return op(b, "divide", op(b, "sum", loss), b.shape(logp)[0] * _spatial(b, logp))
    return _reduce(b, loss, reduction, where)


def _spatial(b, x):
    """The number of positions per sample beyond (N, C)."""
    count = 1
    for size in b.shape(x)[2:]:
        count = count * size
    return count


def _along_axis1(b, weight, x):
    """A per-class weight (C,) shaped to broadcast along axis 1 of x."""
    return op(b, "reshape", weight, [1, -1] + [1] * (b.ndim(x) - 2))


def _no_legacy(size_average, reduce, where):
    if size_average is not None or reduce is not None:
        raise Diagnostic(f"{where}: size_average and reduce are deprecated in torch; use reduction=")


def _pair(b, input, target, where):
    """An element-wise loss's input and target, both tensors."""
    return tensor(b, input, where), tensor(b, target, where)


@torch_rule(F.mse_loss, name="F.mse_loss")
def mse_loss(b, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    _no_legacy(size_average, reduce, "F.mse_loss()")
    x, t = _pair(b, input, target, "F.mse_loss()")
    diff = op(b, "subtract", x, t)
    return _reduce(b, op(b, "multiply", diff, diff), reduction, "F.mse_loss()")


@torch_rule(F.l1_loss, name="F.l1_loss")
def l1_loss(b, input, target, size_average=None, reduce=None, reduction="mean"):
    _no_legacy(size_average, reduce, "F.l1_loss()")
    x, t = _pair(b, input, target, "F.l1_loss()")
    return _reduce(b, op(b, "abs", op(b, "subtract", x, t)), reduction, "F.l1_loss()")


@torch_rule(F.smooth_l1_loss, name="F.smooth_l1_loss")
def smooth_l1_loss(b, input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    _no_legacy(size_average, reduce, "F.smooth_l1_loss()")
    x, t = _pair(b, input, target, "F.smooth_l1_loss()")
    diff = op(b, "abs", op(b, "subtract", x, t))
    if beta == 0:
        return _reduce(b, diff, reduction, "F.smooth_l1_loss()")
    quadratic = op(b, "divide", op(b, "multiply", op(b, "multiply", diff, diff), 0.5), float(beta))
    loss = op(b, "where", op(b, "less", diff, float(beta)), quadratic, op(b, "subtract", diff, 0.5 * beta))
    return _reduce(b, loss, reduction, "F.smooth_l1_loss()")


@torch_rule(F.huber_loss, name="F.huber_loss")
def huber_loss(b, input, target, reduction="mean", delta=1.0, weight=None):
    x, t = _pair(b, input, target, "F.huber_loss()")
    diff = op(b, "abs", op(b, "subtract", x, t))
    quadratic = op(b, "multiply", op(b, "multiply", diff, diff), 0.5)
    linear_part = op(b, "multiply", op(b, "subtract", diff, 0.5 * delta), float(delta))
    loss = op(b, "where", op(b, "less", diff, float(delta)), quadratic, linear_part)
    return _reduce(b, loss, reduction, "F.huber_loss()")


@torch_rule(F.kl_div, name="F.kl_div")
def kl_div(b, input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target · (log target − input), 0 where target is 0 (torch's xlogy); 'batchmean' divides by N."""
    where = "F.kl_div()"
    _no_legacy(size_average, reduce, where)
    x, t = _pair(b, input, target, where)
    if log_target:
        loss = op(b, "multiply", op(b, "exp", t), op(b, "subtract", t, x))
    else:
        log_t = op(b, "log", op(b, "where", op(b, "equal", t, 0.0), 1.0, t))
        loss = op(b, "subtract", op(b, "multiply", t, log_t), op(b, "multiply", t, x))
    if reduction == "batchmean":
        batch = b.shape(x)[0] if b.ndim(x) else 1
        return op(b, "divide", op(b, "sum", loss), batch)
    return _reduce(b, loss, reduction, where)


@torch_rule(F.binary_cross_entropy_with_logits, name="F.binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(b, input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """(1 − t)·x + (1 + (pw − 1)·t)·(log1p(exp(−|x|)) + max(−x, 0)), torch's stable form."""
    where = "F.binary_cross_entropy_with_logits()"
    _no_legacy(size_average, reduce, where)
    x, t = _pair(b, input, target, where)
    softplus_neg = op(b, "add", op(b, "log", op(b, "add", op(b, "exp", op(b, "negative", op(b, "abs", x))), 1.0)),
                      op(b, "maximum", op(b, "negative", x), 0.0))
    factor = 1.0 if pos_weight is None else op(b, "add", op(b, "multiply", op(b, "subtract", pos_weight, 1.0), t), 1.0)
    loss = op(b, "add", op(b, "multiply", op(b, "subtract", 1.0, t), x), op(b, "multiply", factor, softplus_neg))
    if weight is not None:
        loss = op(b, "multiply", loss, weight)
    return _reduce(b, loss, reduction, where)


@torch_rule(F.binary_cross_entropy, name="F.binary_cross_entropy")
def binary_cross_entropy(b, input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """−(t·log x + (1 − t)·log(1 − x)), each log clamped at −100 as torch does."""
    where = "F.binary_cross_entropy()"
    _no_legacy(size_average, reduce, where)
    x, t = _pair(b, input, target, where)
    log_x = op(b, "maximum", op(b, "log", x), -100.0)
    log_1mx = op(b, "maximum", op(b, "log", op(b, "subtract", 1.0, x)), -100.0)
    loss = op(b, "negative", op(b, "add", op(b, "multiply", t, log_x),
                                op(b, "multiply", op(b, "subtract", 1.0, t), log_1mx)))
    if weight is not None:
        loss = op(b, "multiply", loss, weight)
    return _reduce(b, loss, reduction, where)
