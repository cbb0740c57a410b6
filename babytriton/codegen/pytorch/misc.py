"""torch names the other tables leave out: conj and friends on real tensors, bit shifts with torch's
meaning for any shift count, window pools with whole windows, conv1d and F.pad.

Shifts: TVM's `<<`/`>>` are C's, undefined for a count < 0 or >= the bit width; torch gives 0 there
(and, shifting right a signed value, its sign). The pools whose windows tile the input (adaptive pools
whose output size divides the input's, pools with stride == kernel) are a reshape and a mean/max, which
fuse and differentiate; other windows are refused with a located error. conv1d is Relax's nn.conv2d
over a height of 1 (whose gradient is compiled).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...core.errors import Diagnostic
from ...core.types import format_shape, is_float_dtype
from . import indexing
from .pointwise import HALVES, dtype_of_result
from .registry import op, tensor, torch_rule
from .shapes import sliced


# ----------------------------------------------------------------------------------------------
# conj, resolve_conj, resolve_neg: real tensors have no imaginary part
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.conj, torch.Tensor.conj, torch.resolve_conj, torch.Tensor.resolve_conj, torch.resolve_neg,
            torch.Tensor.resolve_neg, torch.conj_physical, torch.Tensor.conj_physical,
            methods=("conj", "resolve_conj", "resolve_neg", "conj_physical"))
def conj(b, input):
    """torch.conj (and resolve_conj, resolve_neg, conj_physical): a real tensor's own value."""
    return tensor(b, input, "torch.conj()")


# ----------------------------------------------------------------------------------------------
# shifts
# ----------------------------------------------------------------------------------------------
def shift(b, direction: str, input, other):
    """`input << other` / `>>` as torch computes them: counts outside [0, bits) give 0 (a right shift of
    a signed value gives its sign, as a shift by bits - 1)."""
    where = f"torch.bitwise_{direction}_shift()"
    dtype = dtype_of_result(b, input, other)
    if is_float_dtype(dtype) or dtype == "bool":
        raise Diagnostic(f"{where}: shifts take integer tensors (torch refuses {dtype} too), got "
                         f"{b.describe(input)} and {b.describe(other)}")
    bits = torch.iinfo(getattr(torch, dtype)).bits
    name = "left_shift" if direction == "left" else "right_shift"
    signed_right = direction == "right" and not dtype.startswith("uint")
    if not b.is_tensor(other):  # a count known now
        if 0 <= other < bits:
            return op(b, name, input, other)
        return op(b, name, input, bits - 1) if signed_right else op(b, "zeros_like", b.as_tensor(input, dtype))
    count = b.as_tensor(other, dtype)
    outside = op(b, "logical_or", op(b, "less", count, 0), op(b, "greater_equal", count, bits))
    shifted = op(b, name, input, op(b, "where", outside, bits - 1 if signed_right else 0, count))
    return shifted if signed_right else op(b, "where", outside, b.const(0, dtype), shifted)


@torch_rule(torch.bitwise_left_shift, torch.Tensor.bitwise_left_shift, torch.Tensor.__lshift__,
            methods=("bitwise_left_shift", "__lshift__"))
def bitwise_left_shift(b, input, other):
    """torch.bitwise_left_shift: `<<` (0 for counts outside [0, bits))."""
    return shift(b, "left", tensor(b, input, "torch.bitwise_left_shift()"), other)


@torch_rule(torch.bitwise_right_shift, torch.Tensor.bitwise_right_shift, torch.Tensor.__rshift__,
            methods=("bitwise_right_shift", "__rshift__"))
def bitwise_right_shift(b, input, other):
    """torch.bitwise_right_shift: `>>` (arithmetic for signed values)."""
    return shift(b, "right", tensor(b, input, "torch.bitwise_right_shift()"), other)


# ----------------------------------------------------------------------------------------------
# pools whose windows tile the input
# ----------------------------------------------------------------------------------------------
def _sizes(value, n: int, where: str, name: str, allow_none: bool = False) -> list:
    items = list(value) if isinstance(value, (tuple, list)) else [value] * n
    ok = len(items) == n and all(v is None and allow_none or isinstance(v, int) and not isinstance(v, bool) and v > 0
                                 for v in items)
    if not ok:
        raise Diagnostic(f"{where}: {name} must be a positive int or a tuple of {n}, got {value!r}")
    return items


def _windows(b, x, n: int, windows: list, reduce: str, where: str):
    """x's last n dims cut into whole windows of the given sizes (a tail that fills none dropped, as
    torch's floor mode), each reduced by `reduce` ("mean" or "max")."""
    if b.ndim(x) not in (n + 1, n + 2):
        raise Diagnostic(f"{where}: expected a {n + 1}-d or {n + 2}-d input, got {b.describe(x)}")
    if reduce == "mean" and not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"{where}: expected a float tensor, got {b.describe(x)} (torch refuses it too)")
    shape = list(b.shape(x))
    lead, spatial = shape[:-n], shape[-n:]
    if not all(isinstance(s, int) for s in spatial):
        raise Diagnostic(f"{where}: needs the spatial sizes at compile time, got {format_shape(shape)}")
    counts = [s // k for s, k in zip(spatial, windows)]
    if 0 in counts:
        raise Diagnostic(f"{where}: the window {tuple(windows)} is larger than the input's size {tuple(spatial)}")
    if any(c * k != s for c, k, s in zip(counts, windows, spatial)):
        x = op(b, "strided_slice", x, list(range(len(lead), len(shape))), [0] * n,
               [c * k for c, k in zip(counts, windows)])
    split = [size for c, k in zip(counts, windows) for size in (c, k)]
    inner = [len(lead) + 2 * i + 1 for i in range(n)]
    return op(b, reduce, op(b, "reshape", x, lead + split), inner)


def _adaptive(b, input, output_size, n: int, reduce: str, where: str):
    """An adaptive pool whose output size divides the input's: windows of input / output."""
    x = tensor(b, input, where)
    if b.ndim(x) not in (n + 1, n + 2):
        raise Diagnostic(f"{where}: expected a {n + 1}-d or {n + 2}-d input, got {b.describe(x)}")
    spatial = list(b.shape(x))[-n:]
    out = [s if o is None else o for o, s in zip(_sizes(output_size, n, where, "output_size", True), spatial)]
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, out)):
        raise Diagnostic(f"{where}: output size {tuple(out)} must divide the input's size {format_shape(spatial)} "
                         "in @jit code (torch's overlapping windows otherwise are not supported)")
    return _windows(b, x, n, [s // o for s, o in zip(spatial, out)], reduce, where)


def _no_indices(return_indices, where: str) -> None:
    if return_indices:
        raise Diagnostic(f"{where}: return_indices=True is not supported in @jit code")


@torch_rule(F.adaptive_avg_pool1d, name="F.adaptive_avg_pool1d")
def adaptive_avg_pool1d(b, input, output_size):
    """F.adaptive_avg_pool1d: output sizes that divide the input's (windows that tile it)."""
    return _adaptive(b, input, output_size, 1, "mean", "F.adaptive_avg_pool1d()")


@torch_rule(F.adaptive_avg_pool2d, name="F.adaptive_avg_pool2d")
def adaptive_avg_pool2d(b, input, output_size):
    """F.adaptive_avg_pool2d: output sizes that divide the input's (1: the global average pool)."""
    return _adaptive(b, input, output_size, 2, "mean", "F.adaptive_avg_pool2d()")


@torch_rule(F.adaptive_max_pool1d, name="F.adaptive_max_pool1d")
def adaptive_max_pool1d(b, input, output_size, return_indices=False):
    """F.adaptive_max_pool1d: output sizes that divide the input's; values only."""
    _no_indices(return_indices, "F.adaptive_max_pool1d()")
    return _adaptive(b, input, output_size, 1, "max", "F.adaptive_max_pool1d()")


@torch_rule(F.adaptive_max_pool2d, name="F.adaptive_max_pool2d")
def adaptive_max_pool2d(b, input, output_size, return_indices=False):
    """F.adaptive_max_pool2d: output sizes that divide the input's; values only."""
    _no_indices(return_indices, "F.adaptive_max_pool2d()")
    return _adaptive(b, input, output_size, 2, "max", "F.adaptive_max_pool2d()")


def _pool(b, input, n: int, reduce: str, kernel_size, stride, options: dict, where: str):
    """A pool with stride == kernel_size and no padding (a reshape and a reduction); other options refused."""
    kernel = _sizes(kernel_size, n, where, "kernel_size")
    strides = kernel if stride is None or stride == [] else _sizes(stride, n, where, "stride")
    options["stride != kernel_size"] = strides != kernel
    refused = [name for name, used in options.items() if used]
    if refused:
        raise Diagnostic(f"{where}: {', '.join(refused)} is not supported in @jit code (only windows that tile "
                         "the input: stride == kernel_size, no padding, no dilation, floor mode)")
    return _windows(b, tensor(b, input, where), n, kernel, reduce, where)


def _unused(n: int, padding, ceil_mode, dilation=1) -> dict:
    return {"padding": padding not in (0, (0,) * n, [0] * n), "dilation": dilation not in (1, (1,) * n, [1] * n),
            "ceil_mode=True": bool(ceil_mode)}


def _avg_pool(n: int):
    def rule(b, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
        options = {**_unused(n, padding, ceil_mode), "divisor_override": divisor_override is not None}
        return _pool(b, input, n, "mean", kernel_size, stride, options, f"F.avg_pool{n}d()")
    rule.__name__ = f"avg_pool{n}d"
    rule.__doc__ = f"F.avg_pool{n}d with stride == kernel_size and no padding: a reshape and a mean."
    return rule


def _max_pool(n: int):
    def rule(b, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        options = {**_unused(n, padding, ceil_mode, dilation), "return_indices=True": bool(return_indices)}
        return _pool(b, input, n, "max", kernel_size, stride, options, f"F.max_pool{n}d()")
    rule.__name__ = f"max_pool{n}d"
    rule.__doc__ = f"F.max_pool{n}d with stride == kernel_size and no padding: a reshape and a max (NaN propagates)."
    return rule


for _n in (1, 2):
    torch_rule(getattr(F, f"avg_pool{_n}d"), name=f"F.avg_pool{_n}d")(_avg_pool(_n))
    torch_rule(getattr(F, f"max_pool{_n}d"), name=f"F.max_pool{_n}d")(_max_pool(_n))


# ----------------------------------------------------------------------------------------------
# conv1d
# ----------------------------------------------------------------------------------------------
def _padding(padding, dilation: int, k: int, stride: int, where: str) -> list:
    """torch's padding (an int, a 1-tuple, 'valid' or 'same') as Relax's (left, right)."""
    if padding == "valid":
        return [0, 0]
    if padding == "same":
        if stride != 1:
            raise Diagnostic(f"{where}: padding='same' is not supported for strided convolutions")
        total = dilation * (k - 1)
        return [total // 2, total - total // 2]
    (p,) = _sizes(padding, 1, where, "padding") if padding != 0 and padding != (0,) else [0]
    return [p, p]


@torch_rule(torch.conv1d, name="F.conv1d")
def conv1d(b, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv1d: Relax's nn.conv2d on a height of 1, groups (depthwise too) and 'same'/'valid' padding; an
    unbatched (C, L) input as a batch of one; halves computed in float32 and rounded once, as torch."""
    where = "F.conv1d()"
    x, w = tensor(b, input, where), tensor(b, weight, where)
    if b.ndim(x) not in (2, 3) or b.ndim(w) != 3:
        raise Diagnostic(f"{where}: expected a 2-d or 3-d input and a 3-d weight, got {b.describe(x)} and "
                         f"{b.describe(w)}")
    if b.dtype(x) != b.dtype(w) or not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"{where}: input and weight must be float tensors of one dtype, got {b.describe(x)} and "
                         f"{b.describe(w)}")
    (s,), (d,) = _sizes(stride, 1, where, "stride"), _sizes(dilation, 1, where, "dilation")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise Diagnostic(f"{where}: groups must be a positive int, got {groups!r}")
    batched = x if b.ndim(x) == 3 else op(b, "expand_dims", x, 0)
    (_, c, length), (o, cg, k) = b.shape(batched), b.shape(w)
    for ok, message in ((isinstance(c, int) and c != cg * groups, f"expected input with {cg * groups} channels "
                         f"(weight {format_shape(b.shape(w))}, groups={groups}), got {c}"),
                        (isinstance(o, int) and o % groups, f"out_channels {o} must be divisible by groups={groups}")):
        if ok:
            raise Diagnostic(f"{where}: {message}")
    pads = _padding(padding, d, k, s, where)
    if isinstance(length, int) and isinstance(k, int) and length + sum(pads) < d * (k - 1) + 1:
        raise Diagnostic(f"{where}: the padded input length {length + sum(pads)} is smaller than the kernel's "
                         f"span {d * (k - 1) + 1}")
    dtype = b.dtype(x)
    wide = "float32" if dtype in HALVES else dtype
    # as a conv2d of height 1: the same kernel, and conv2d's gradient is compiled (conv1d has none)
    rows, kernels = op(b, "expand_dims", b.as_tensor(batched, wide), 2), op(b, "expand_dims", b.as_tensor(w, wide), 2)
    y = op(b, "conv2d", rows, kernels, (1, s), (0, pads[0], 0, pads[1]), (1, d), groups)
    y = op(b, "squeeze", y, [2])
    if bias is not None:
        bias = tensor(b, bias, where)
        y = op(b, "add", y, op(b, "reshape", b.as_tensor(bias, wide), [1, -1, 1]))
    y = b.as_tensor(y, dtype)
    return y if b.ndim(x) == 3 else op(b, "squeeze", y, [0])


# ----------------------------------------------------------------------------------------------
# F.pad: the borders as tensors of their own, concatenated (negative pads crop)
# ----------------------------------------------------------------------------------------------
def _border(b, x, axis: int, amount: int, side: str, mode: str, value):
    """The `amount` elements F.pad puts on one side of `axis` in `mode`."""
    size = b.shape(x)[axis]
    if mode == "constant":
        shape = [amount if a == axis else s for a, s in enumerate(b.shape(x))]
        return op(b, "broadcast_to", value, shape)
    if mode == "replicate":
        edge = sliced(b, x, axis, 0, 1) if side == "before" else sliced(b, x, axis, size - 1, size)
        return op(b, "broadcast_to", edge, [amount if a == axis else s for a, s in enumerate(b.shape(x))])
    if mode == "circular":
        return sliced(b, x, axis, size - amount, size) if side == "before" else sliced(b, x, axis, 0, amount)
    part = sliced(b, x, axis, 1, amount + 1) if side == "before" else sliced(b, x, axis, size - 1 - amount, size - 1)
    return op(b, "flip", part, axis)  # reflect


PAD_LIMIT = {"reflect": lambda p, size: p < size, "circular": lambda p, size: p <= size,
             "replicate": lambda p, size: size > 0}


@torch_rule(F.pad, name="F.pad")
def pad(b, input, pad, mode="constant", value=None):
    """F.pad: pad = (left, right) pairs from the last dim backwards; 'constant' (negative pads crop),
    'reflect', 'replicate' and 'circular' modes, on any rank."""
    where = "F.pad()"
    x = tensor(b, input, where)
    if not isinstance(pad, (tuple, list)) or len(pad) % 2 or len(pad) // 2 > b.ndim(x) or \
            not all(isinstance(p, int) and not isinstance(p, bool) for p in pad):
        raise Diagnostic(f"{where}: pad must be a tuple of an even number (at most 2 * ndim = {2 * b.ndim(x)}) "
                         f"of ints, got {pad!r}")
    if mode not in ("constant", *PAD_LIMIT):
        raise Diagnostic(f"{where}: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if mode != "constant" and value not in (None, 0):
        raise Diagnostic(f"{where}: padding mode {mode!r} doesn't take in value argument")
    fill = indexing.cast(b, 0 if value is None else value, b.dtype(x))
    for i in range(len(pad) // 2):
        axis = b.ndim(x) - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = b.shape(x)[axis]
        if mode != "constant" and (min(before, after) < 0 or isinstance(size, int) and
                                   not all(PAD_LIMIT[mode](p, size) for p in (before, after) if p)):
            raise Diagnostic(f"{where}: padding ({before}, {after}) is too large (or negative) for mode {mode!r} "
                             f"at dim {axis} of size {size}")
        x = sliced(b, x, axis, max(-before, 0), size - max(-after, 0) if max(-after, 0) else size)
        parts = [_border(b, x, axis, before, "before", mode, fill)] if before > 0 else []
        parts += [x] + ([_border(b, x, axis, after, "after", mode, fill)] if after > 0 else [])
        x = op(b, "concat", parts, axis) if len(parts) > 1 else x
    return x
