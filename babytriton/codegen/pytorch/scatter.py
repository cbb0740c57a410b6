"""The scatter family as torch spells it: scatter (src or value, reduce=), scatter_add, scatter_reduce,
index_add/index_copy/index_fill, index_put, masked_scatter, put and take.

Each writes into a new tensor (the in-place forms, `x.scatter_(...)`, are these rules' results written
back by the in-place machinery). The writes are the library's scatter_elements, whose compiled gradient
covers plain writes and sums (other reductions differentiate through torch over the eager reference);
reductions torch defines otherwise (scatter_reduce's include_self=False, its mean) are built around it.
Index values are not checked against the sizes (torch raises on one out of range; TVM's kernels would
read or write out of bounds), as for gather: a run-time check would split the function's dataflow
block, which its compiled gradient needs. bincount's values are checked (`_check_data`): a value past
minlength would make the result's size depend on the data.
"""
from __future__ import annotations

import math

import torch
import tvm

from ...core.errors import Diagnostic
from ...core.types import format_shape, is_float_dtype
from .. import library
from ..values import broadcast, same_size
from . import indexing
from .registry import dim as one_dim
from .registry import op, tensor, torch_rule
from .shapes import equal, require, reshaped

# torch's reduce names -> scatter_elements' (scatter's legacy `reduce=`, scatter_reduce's)
SCATTER_REDUCE = {None: "update", "add": "add", "multiply": "mul"}
REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "add"}


def _numel(shape):
    """The element count of a shape: an int, or a TIR product of symbolic sizes."""
    return math.prod(shape) if all(isinstance(s, int) for s in shape) else math.prod(shape[1:], start=shape[0])


def _size_tensor(b, size):
    """A size as a 0-d int64 tensor (a symbolic one counted, as no op reads a shape as a value)."""
    return size if isinstance(size, int) else op(b, "sum", op(b, "ones", (size,), "int64"))


def _int64_index(b, index, where: str):
    if not b.is_tensor(index) or b.dtype(index) != "int64":
        raise Diagnostic(f"{where}: Expected dtype int64 for index, got {b.describe(index)}")
    return index


def _scatter_operands(b, x, axis: int, index, src, where: str):
    """index and src checked as torch checks them, src cut to index's shape (torch reads only that part)."""
    if b.ndim(index) != b.ndim(x) or b.ndim(src) != b.ndim(x):
        raise Diagnostic(f"{where}: Index tensor must have the same number of dimensions as self tensor and src "
                         f"tensor, got {b.describe(x)}, index {b.describe(index)} and src {b.describe(src)}")
    if b.dtype(src) != b.dtype(x):
        raise Diagnostic(f"{where}: Expected self.dtype to be equal to src.dtype, got {b.dtype(x)} and {b.dtype(src)}")
    xs, js, ss = b.shape(x), b.shape(index), b.shape(src)
    message = (f"{where}: Expected index {format_shape(js)} to be smaller than self {format_shape(xs)} apart from "
               f"dimension {axis} and to be smaller size than src {format_shape(ss)}")
    for a in range(len(xs)):
        for bigger in ([ss[a]] if a == axis else [ss[a], xs[a]]):
            if not same_size(js[a], bigger):
                require(b, _le(js[a], bigger), message)
    if not all(same_size(j, s) for j, s in zip(js, ss)):
        src = op(b, "strided_slice", src, list(range(len(js))), [0] * len(js), list(js))
    return src


def _le(a, c):
    return a <= c if isinstance(a, int) and isinstance(c, int) else _prim(a) <= _prim(c)


def _prim(v):
    return tvm.tirx.const(v, "int64") if isinstance(v, int) else v


def _check_data(b, ok, message: str) -> None:
    """A condition on tensor values (a 0-d bool tensor): checked when compiled code runs on a CPU (on a
    GPU, reading it back would wait for the device), and at once by the eager reference."""
    cg = getattr(b, "cg", None)
    if cg is None:
        if not bool(ok):
            raise Diagnostic(message)
    elif cg.options.device_kind == "cpu" and cg.placement is None:
        library.run_time_check(cg, ok, message)


def _check_range(b, index, size, where: str, negative: bool = False) -> None:
    """Every index in [0, size) (in [-size, size) where torch counts negative ones from the end)."""
    low = op(b, "negative", _size_tensor(b, size)) if negative else 0
    bad = op(b, "logical_or", op(b, "less", index, low), op(b, "greater_equal", index, _size_tensor(b, size)))
    none = op(b, "equal", op(b, "sum", b.as_tensor(bad, "int32")), 0)
    _check_data(b, none, f"{where}: an index is out of bounds for a dimension of size {size} (torch raises too)")


def _scattered(b, x, axis: int, index, updates, reduction: str, where: str):
    """scatter_elements (its indices checked), or x itself where index has no elements (TVM's kernel
    cannot take an empty one)."""
    count = _numel(tuple(b.shape(index)))
    if isinstance(count, int) and count == 0:
        return x
    return op(b, "scatter_elements", x, index, updates, axis, reduction)


@torch_rule(torch.scatter, torch.Tensor.scatter, methods=("scatter",))
def scatter(b, input, dim, index, src=None, value=None, *, reduce=None):
    """torch.scatter: self[index[i][j]][j] = src[i][j] (dim 0), or the number `value`; reduce='add' or
    'multiply' combines with what is there instead."""
    where = "torch.scatter()"
    x = tensor(b, input, where)
    axis = one_dim(b, x, dim, where)
    index = _int64_index(b, index, where)
    if src is not None and not b.is_tensor(src):
        src, value = None, src  # scatter(dim, index, 1.0): the value overload
    if (src is None) == (value is None):
        raise Diagnostic(f"{where}: pass one of src (a tensor) or value (a number)")
    if reduce not in SCATTER_REDUCE:
        raise Diagnostic(f"{where}: reduce must be 'add' or 'multiply', got {reduce!r}")
    if value is not None:
        if b.is_tensor(value) and b.ndim(value) != 0:
            raise Diagnostic(f"{where}: value must be a number or a 0-d tensor, got {b.describe(value)}")
        src = op(b, "broadcast_to", indexing.cast(b, value, b.dtype(x)), list(b.shape(index)))
    src = _scatter_operands(b, x, axis, index, tensor(b, src, where), where)
    return _scattered(b, x, axis, index, src, SCATTER_REDUCE[reduce], where)


@torch_rule(torch.scatter_add, torch.Tensor.scatter_add, methods=("scatter_add",))
def scatter_add(b, input, dim, index, src):
    """torch.scatter_add: self[index[i][j]][j] += src[i][j] (dim 0)."""
    return scatter(b, input, dim, index, tensor(b, src, "torch.scatter_add()"), reduce="add")


@torch_rule(torch.scatter_reduce, torch.Tensor.scatter_reduce, methods=("scatter_reduce",))
def scatter_reduce(b, input, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: 'sum', 'prod', 'mean', 'amax' or 'amin' of the src values at each index,
    with self's value (include_self) or without it (places no index names keep self's value)."""
    where = "torch.scatter_reduce()"
    x = tensor(b, input, where)
    axis = one_dim(b, x, dim, where)
    index = _int64_index(b, index, where)
    if reduce not in REDUCE:
        raise Diagnostic(f"{where}: reduce argument must be either sum, prod, mean, amax or amin, got {reduce!r}")
    src = _scatter_operands(b, x, axis, index, tensor(b, src, where), where)
    if isinstance(_numel(tuple(b.shape(index))), int) and _numel(tuple(b.shape(index))) == 0:
        return x
    hit = None
    if not include_self or reduce == "mean":
        ones = op(b, "ones_like", src)
        counts = op(b, "scatter_elements", op(b, "zeros_like", x), index, ones, axis, "add")
        hit = op(b, "greater", counts, 0)
    base = x if include_self else op(b, "where", hit, _identity(b, reduce, b.dtype(x)), x)
    result = op(b, "scatter_elements", base, index, src, axis, REDUCE[reduce])
    if reduce in ("amax", "amin") and is_float_dtype(b.dtype(x)):
        return _with_nan(b, x if include_self else None, axis, index, src, result)
    if reduce != "mean":
        return result
    if include_self:
        counts = op(b, "add", counts, 1)
    divided = op(b, "divide" if is_float_dtype(b.dtype(x)) else "floor_divide", result,
                 op(b, "where", hit, counts, op(b, "ones_like", counts)))
    return b.as_tensor(op(b, "where", hit, divided, x), b.dtype(x))


def _with_nan(b, x, axis: int, index, src, result):
    """amax/amin with torch's NaN: a NaN among the values meeting at a place (TVM's max drops it) makes it NaN."""
    flags = b.as_tensor(op(b, "isnan", src), "int32")
    nan = op(b, "greater", op(b, "scatter_elements", op(b, "zeros_like", result, "int32"), index, flags, axis, "add"), 0)
    nan = nan if x is None else op(b, "logical_or", nan, op(b, "isnan", x))
    return op(b, "where", nan, b.const(math.nan, b.dtype(result)), result)


def _identity(b, reduce: str, dtype: str):
    """The value a reduction starts from (include_self=False): nothing else counts there."""
    if reduce in ("sum", "mean"):
        return b.const(0, dtype)
    if reduce == "prod":
        return b.const(1, dtype)
    info = torch.finfo if is_float_dtype(dtype) else torch.iinfo
    kind = getattr(torch, dtype)
    extreme = (-math.inf if reduce == "amax" else math.inf) if is_float_dtype(dtype) else \
        (info(kind).min if reduce == "amax" else info(kind).max)
    return b.const(extreme, dtype)


# ----------------------------------------------------------------------------------------------
# index_add, index_copy, index_fill: whole slices of dim, chosen by a vector of indices
# ----------------------------------------------------------------------------------------------
def _slices(b, x, dim, index, source, where: str):
    """(axis, index spread to source's shape along the axis, source) for index_add/index_copy."""
    axis = one_dim(b, x, dim, where) if b.ndim(x) else 0
    if not b.is_tensor(index) or b.dtype(index) not in ("int64", "int32") or b.ndim(index) > 1:
        raise Diagnostic(f"{where}: index must be a 1-d int64 or int32 tensor, got {b.describe(index)}")
    source = tensor(b, source, where)
    if b.dtype(source) != b.dtype(x):
        raise Diagnostic(f"{where}: self ({b.dtype(x)}) and source ({b.dtype(source)}) must have the same scalar type")
    index = reshaped(b, b.as_tensor(index, "int64"), [-1])
    x1, s1 = (op(b, "reshape", v, [1]) if b.ndim(v) == 0 else v for v in (x, source))
    xs, ss = b.shape(x1), b.shape(s1)
    if len(ss) != len(xs):
        raise Diagnostic(f"{where}: source {format_shape(ss)} must have the same number of dims as self "
                         f"{format_shape(xs)}")
    for a, (have, want) in enumerate(zip(ss, xs)):
        size = b.shape(index)[0] if a == axis else want
        require(b, equal(have, size), f"{where}: source {format_shape(ss)} must have self's shape "
                                      f"{format_shape(xs)} with index's size {size} at dim {axis}")
    spread = op(b, "reshape", index, [-1 if a == axis else 1 for a in range(len(xs))])
    return axis, x1, op(b, "broadcast_to", spread, list(ss)), s1


@torch_rule(torch.index_add, torch.Tensor.index_add, methods=("index_add",))
def index_add(b, input, dim, index, source, *, alpha=1):
    """torch.index_add: self[index[i]] += alpha * source[i] along dim (repeated indices add up)."""
    x = tensor(b, input, "torch.index_add()")
    axis, x1, spread, s1 = _slices(b, x, dim, index, source, "torch.index_add()")
    if alpha != 1:
        s1 = b.as_tensor(op(b, "multiply", s1, alpha), b.dtype(x))
    return reshaped(b, _scattered(b, x1, axis, spread, s1, "add", "torch.index_add()"), list(b.shape(x)))


@torch_rule(torch.index_copy, torch.Tensor.index_copy, methods=("index_copy",))
def index_copy(b, input, dim, index, source):
    """torch.index_copy: self[index[i]] = source[i] along dim."""
    x = tensor(b, input, "torch.index_copy()")
    axis, x1, spread, s1 = _slices(b, x, dim, index, source, "torch.index_copy()")
    return reshaped(b, _scattered(b, x1, axis, spread, s1, "update", "torch.index_copy()"), list(b.shape(x)))


@torch_rule(torch.index_fill, torch.Tensor.index_fill, methods=("index_fill",))
def index_fill(b, input, dim, index, value):
    """torch.index_fill: the slices index (negative ones from the end) of dim set to value."""
    where = "torch.index_fill()"
    x = tensor(b, input, where)
    if b.ndim(x) == 0:
        x1 = op(b, "reshape", x, [1])
        return op(b, "reshape", index_fill(b, x1, 0, index, value), [])
    axis = one_dim(b, x, dim, where)
    if not b.is_tensor(index) or b.dtype(index) != "int64" or b.ndim(index) > 1:
        raise Diagnostic(f"{where}: index must be a 1-d int64 tensor, got {b.describe(index)}")
    if b.is_tensor(value) and b.ndim(value) != 0:
        raise Diagnostic(f"{where}: only supports a 0-dimensional value tensor, got {b.describe(value)}")
    size = b.shape(x)[axis]
    positions = op(b, "arange", 0, size, 1, "int64")
    wrapped = op(b, "floor_mod", reshaped(b, index, [1, -1]), _size_tensor(b, size))
    hit = op(b, "greater", op(b, "sum", b.as_tensor(op(b, "equal", op(b, "expand_dims", positions, 1), wrapped),
                                                   "int32"), [1]), 0)
    mask = op(b, "reshape", hit, [-1 if a == axis else 1 for a in range(b.ndim(x))])
    return op(b, "where", mask, indexing.cast(b, value, b.dtype(x)), x)


# ----------------------------------------------------------------------------------------------
# index_put, masked_scatter, put, take: positions in the flattened tensor
# ----------------------------------------------------------------------------------------------
def _positions(b, x):
    """Each element's position in the flattened x, in x's shape (int64), and their count."""
    shape = tuple(b.shape(x))
    count = _numel(shape) if shape else 1
    return op(b, "reshape", op(b, "arange", 0, count, 1, "int64"), list(shape)), count


@torch_rule(torch.index_put, torch.Tensor.index_put, methods=("index_put",))
def index_put(b, input, indices, values, accumulate=False):
    """torch.index_put: x[indices] = values (indexing's setitem), or += with accumulate=True (repeated
    positions add up)."""
    where = "torch.index_put()"
    x = tensor(b, input, where)
    if not isinstance(indices, (tuple, list)) or not all(v is None or b.is_tensor(v) for v in indices):
        raise Diagnostic(f"{where}: indices must be a tuple of tensors, got {b.describe(indices)}")
    values = tensor(b, values, where)
    if b.dtype(values) != b.dtype(x):
        raise Diagnostic(f"{where}: Index put requires the source and destination dtypes match, got "
                         f"{b.dtype(x)} for the destination and {b.dtype(values)} for the source")
    index = tuple(slice(None) if v is None else v for v in indices)
    if not accumulate:
        return indexing.setitem(b, x, index, values)
    positions, count = _positions(b, x)
    region = indexing.getitem(b, positions, index)
    value = op(b, "broadcast_to", values, list(b.shape(region)))
    flat = op(b, "reshape", x, [count])
    added = _scattered(b, flat, 0, op(b, "reshape", region, [-1]), op(b, "reshape", value, [-1]), "add", where)
    return op(b, "reshape", added, list(b.shape(x)))


@torch_rule(torch.masked_scatter, torch.Tensor.masked_scatter, methods=("masked_scatter",))
def masked_scatter(b, input, mask, source):
    """torch.masked_scatter: where mask is True (broadcast to x), source's elements in order: the k-th
    True place takes source's k-th element (a cumulative count of the mask finds k). A source with fewer
    elements than the mask's True places is not detected (torch raises)."""
    where = "torch.masked_scatter()"
    x = tensor(b, input, where)
    mask, source = tensor(b, mask, where), tensor(b, source, where)
    if b.dtype(mask) != "bool":
        raise Diagnostic(f"{where}: masked_scatter_ only supports boolean masks, but got mask with dtype "
                         f"{b.dtype(mask)}")
    if b.dtype(source) != b.dtype(x):
        raise Diagnostic(f"{where}: masked_scatter: expected self and source to have same dtypes but got "
                         f"{b.dtype(x)} and {b.dtype(source)}")
    common = broadcast(tuple(b.shape(x)), tuple(b.shape(mask)))
    if common is None:
        raise Diagnostic(f"{where}: mask {format_shape(b.shape(mask))} and self {format_shape(b.shape(x))} "
                         "do not broadcast")
    shape = list(common)
    x = op(b, "broadcast_to", x, shape) if list(b.shape(x)) != shape else x
    mask = op(b, "broadcast_to", mask, shape) if list(b.shape(mask)) != shape else mask
    flat_mask = op(b, "reshape", mask, [-1])
    k = op(b, "subtract", op(b, "cumsum", b.as_tensor(flat_mask, "int64"), 0), 1)
    flat_source = op(b, "reshape", source, [-1])
    if isinstance(_numel(tuple(b.shape(source))), int) and _numel(tuple(b.shape(source))) == 0:
        return x
    taken = op(b, "take", flat_source, op(b, "maximum", k, 0), 0, "clip")
    return op(b, "where", mask, op(b, "reshape", taken, shape), x)


@torch_rule(torch.Tensor.put, methods=("put",), name="Tensor.put")
def put(b, input, index, source, accumulate=False):
    """Tensor.put: the flattened self's elements at index (negative from the end) set to source's (or
    added to, with accumulate=True)."""
    where = "Tensor.put()"
    x = tensor(b, input, where)
    index, source = _int64_index(b, index, where), tensor(b, source, where)
    if b.dtype(source) != b.dtype(x):
        raise Diagnostic(f"{where}: self and source expected to have the same dtype, got {b.dtype(x)} and "
                         f"{b.dtype(source)}")
    require(b, equal(_numel(tuple(b.shape(index)) or (1,)), _numel(tuple(b.shape(source)) or (1,))),
            f"{where}: Expected source and index to have the same number of elements, got "
            f"{format_shape(b.shape(source))} and {format_shape(b.shape(index))}")
    count = _numel(tuple(b.shape(x))) if b.ndim(x) else 1
    flat_index = op(b, "floor_mod", op(b, "reshape", index, [-1]), _size_tensor(b, count))
    flat = _scattered(b, op(b, "reshape", x, [count]), 0, flat_index, op(b, "reshape", source, [-1]),
                      "add" if accumulate else "update", where)
    return op(b, "reshape", flat, list(b.shape(x)))


@torch_rule(torch.take, torch.Tensor.take, methods=("take",))
def take(b, input, index):
    """torch.take: the flattened input's elements at index (negative from the end), in index's shape."""
    x = tensor(b, input, "torch.take()")
    index = _int64_index(b, index, "torch.take()")
    count = _numel(tuple(b.shape(x))) if b.ndim(x) else 1
    wrapped = op(b, "floor_mod", index, _size_tensor(b, count))
    return op(b, "take", op(b, "reshape", x, [count]), wrapped, 0, "clip")


@torch_rule(torch.bincount, torch.Tensor.bincount, methods=("bincount",))
def bincount(b, input, weights=None, minlength=0):
    """torch.bincount with a minlength the values stay below: its size is then minlength (a larger value
    would make the size depend on the data, which compiled code cannot have: it raises, as a bad index)."""
    where = "torch.bincount()"
    x = tensor(b, input, where)
    if b.ndim(x) != 1 or is_float_dtype(b.dtype(x)) or b.dtype(x) == "bool":
        raise Diagnostic(f"{where}: bincount only supports 1-d non-negative integral inputs, got {b.describe(x)}")
    if isinstance(minlength, bool) or not isinstance(minlength, int) or minlength <= 0:
        raise Diagnostic(f"{where}: the result's size is max(input) + 1, known only from the data; in @jit code "
                         f"pass minlength=N (N > every value) to fix it, got minlength={minlength!r}")
    if weights is not None:
        weights = tensor(b, weights, where)
        require(b, equal(b.shape(weights)[0] if b.ndim(weights) == 1 else -1, b.shape(x)[0]),
                f"{where}: weights should be 1-d and have the same length as input")
    dtype = "int64" if weights is None else "float32" if b.dtype(weights) == "float32" else "float64"
    _check_range(b, x, minlength, f"{where} (a value is negative or >= minlength={minlength})")
    added = op(b, "ones", list(b.shape(x)), dtype) if weights is None else b.as_tensor(weights, dtype)
    return _scattered(b, op(b, "zeros", [minlength], dtype), 0, b.as_tensor(x, "int64"), added, "add", where)
