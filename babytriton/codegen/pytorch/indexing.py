"""Indexing as torch means it: `x[index]` (getitem) and `x[index] = value` (setitem), over a library.Builder.

An index is parsed once into entries (`_parse`): ints, slices, `None`, `...`, Python bools and integer
index tensors (tensors, or lists of ints). Reading applies the basic entries with one strided_slice,
a squeeze and expand_dims (views in torch: values here, which Relax fuses into their consumers), then
the advanced ones with one `take` over the merged indexed axes (torch's placement: the broadcast index
dims where the first advanced index was when the advanced indices are adjacent, else in front).
Writing is functional: `setitem` gives the updated tensor, built from `where` (basic regions and bool
masks, differentiable and fused) or `scatter_elements` over the element positions (integer indices).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.errors import Diagnostic
from ...core.types import DTYPES, format_shape
from ..values import broadcast, is_symbolic, same_size
from .registry import op

INDEX_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
_WHERE_MASK = ("boolean-mask indexing `x[mask]` gives a tensor whose size depends on the data (how many "
               "elements are True), which compiled code cannot have; keep the shape with torch.where(mask, x, "
               "other) (or reduce with the mask: (x * mask).sum())")


@dataclass
class Entry:
    """One entry of an index: `kind` is "int", "slice", "new" (None / True), "empty" (False) or "tensor"."""
    kind: str
    value: object = None
    axis: int = -1              # the axis of x it indexes ("int", "slice", "tensor")
    known: list | None = None   # a "tensor" given as a list of ints: its values, checked at compile time


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or is_symbolic(v)


def _is_int_list(v) -> bool:
    if isinstance(v, (list, tuple)):
        return len(v) > 0 and all(_is_int_list(i) for i in v)
    return isinstance(v, int)


def _parse(b, x, index) -> list[Entry]:
    """The entries of `index` (anything Python puts between brackets), each with the axis of x it indexes."""
    items = list(index) if isinstance(index, tuple) else [index]
    entries, ellipsis = [], None
    for item in items:
        if item is Ellipsis:
            if ellipsis is not None:
                raise Diagnostic("an index can only have a single ellipsis ('...')")
            ellipsis = len(entries)
        else:
            entries.append(_entry(b, item))
    consumed = sum(1 for e in entries if e.kind in ("int", "slice", "tensor"))
    ndim = b.ndim(x)
    if consumed > ndim:
        raise Diagnostic(f"too many indices for tensor of dimension {ndim} (got {consumed})")
    if ellipsis is not None:
        entries[ellipsis:ellipsis] = [Entry("slice", slice(None)) for _ in range(ndim - consumed)]
    axis = 0
    for e in entries:
        if e.kind in ("int", "slice", "tensor"):
            e.axis, axis = axis, axis + 1
    entries += [Entry("slice", slice(None), a) for a in range(axis, ndim)]
    return entries


def _entry(b, item) -> Entry:
    if item is None or item is True:
        return Entry("new")
    if item is False:
        return Entry("empty")
    if _is_int(item):
        return Entry("int", item)
    if isinstance(item, slice):
        for part in (item.start, item.stop, item.step):
            if part is not None and not _is_int(part):
                raise Diagnostic(f"slice indices must be integers or None, got {b.describe(part)}")
        if item.step is not None and not isinstance(item.step, int):
            raise Diagnostic("a slice step must be a compile-time int")
        if item.step is not None and item.step <= 0:
            raise Diagnostic("step must be greater than zero (torch takes no negative or zero slice steps; "
                             "reverse an axis with torch.flip)")
        return Entry("slice", item)
    if isinstance(item, (list, tuple)) and item and all(isinstance(i, bool) for i in item):
        known = [i for i, flag in enumerate(item) if flag]  # a mask known at compile time: its positions
        return Entry("tensor", b.index(known), known=known)
    if _is_int_list(item):
        return Entry("tensor", b.index(item), known=list(item))
    if b.is_tensor(item):
        dtype = b.dtype(item)
        if dtype == "bool":
            raise Diagnostic(_WHERE_MASK)
        if dtype not in INDEX_DTYPES:
            raise Diagnostic(f"tensors used as indices must be long, int, byte or bool tensors, got {b.describe(item)}")
        return Entry("tensor", item)
    raise Diagnostic(f"cannot index a tensor with {b.describe(item)}: torch takes ints, slices, None, ..., "
                     "integer tensors and lists of ints")


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------
def _bounds(size, e: Entry):
    """(begin, end, step) of an int or slice entry on an axis of `size` (static: normalised and checked)."""
    if e.kind == "int":
        i = e.value
        if isinstance(size, int) and isinstance(i, int):
            if not -size <= i < size:
                raise Diagnostic(f"index {i} is out of bounds for dimension {e.axis} with size {size}")
            i %= size
            return i, i + 1, 1
        return (size + i, size + i + 1, 1) if isinstance(i, int) and i < 0 else (i, i + 1, 1)
    s = e.value
    step = s.step or 1
    if isinstance(size, int) and all(v is None or isinstance(v, int) for v in (s.start, s.stop)):
        begin, end, _ = slice(s.start, s.stop, step).indices(size)
        return begin, max(begin, end), step
    return (0 if s.start is None else s.start), (size if s.stop is None else s.stop), step


def _is_full(size, begin, end, step) -> bool:
    return isinstance(begin, int) and begin == 0 and step == 1 and (isinstance(end, int) and isinstance(size, int)
                                                                      and end >= size or end is size)


def _basic(b, x, entries: list[Entry]):
    """x with the ints, slices and new axes of the index applied; the axes its tensor entries index."""
    shape = b.shape(x)
    for kind in ("int", "slice"):  # ints are in range (checked, or torch's error): no clamping in the sizes
        axes, begins, ends, steps = [], [], [], []
        for e in entries:
            if e.kind == kind:
                begin, end, step = _bounds(shape[e.axis], e)
                if not _is_full(shape[e.axis], begin, end, step):
                    axes.append(e.axis), begins.append(begin), ends.append(end), steps.append(step)
        if axes:
            x = op(b, "strided_slice", x, axes, begins, ends, steps, kind == "int")
    dropped = [e.axis for e in entries if e.kind == "int"]
    if dropped:
        x = op(b, "squeeze", x, dropped)
    position, advanced = 0, []
    for e in entries:
        if e.kind in ("new", "empty"):
            x = op(b, "expand_dims", x, position)
            if e.kind == "empty":
                x = op(b, "strided_slice", x, [position], [0], [0])
        if e.kind == "tensor":
            advanced.append((position, e))
        if e.kind != "int":
            position += 1
    return x, advanced


def _size_tensor(b, size):
    """A size as a 0-d int64 tensor (a symbolic one counted, as no op reads a shape as a value)."""
    return size if isinstance(size, int) else op(b, "sum", op(b, "ones", (size,), "int64"))


def _wrapped(b, e: Entry, size):
    """An index tensor with its negative entries counted from the end (torch's meaning), as int64: a
    list's at compile time, a tensor's by floor_mod (which also wraps indices past the end, where torch raises)."""
    if e.known is not None and isinstance(size, int):
        return b.index(_nested_map(e.known, lambda i: i % size))
    index = op(b, "astype", e.value, "int64") if b.dtype(e.value) != "int64" else e.value
    return op(b, "floor_mod", index, _size_tensor(b, size))


def _nested_map(items, fn):
    return [_nested_map(i, fn) for i in items] if isinstance(items, (list, tuple)) else fn(items)


def _advanced(b, x, advanced: list):
    """x indexed by integer tensors at these axes together, placed where torch places the result."""
    shape = b.shape(x)
    positions = [p for p, _ in advanced]
    shapes = [b.shape(e.value) for _, e in advanced]
    target = shapes[0]
    for s in shapes[1:]:
        target = broadcast(target, s)
        if target is None:
            raise Diagnostic("shape mismatch: indexing tensors could not be broadcast together with shapes "
                             + " ".join(format_shape(s) for s in shapes))
    for p, e in advanced:
        _check_known(b, e, shape[p])
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if not adjacent:  # the indexed axes go first, in order; the result's index dims lead
        rest = [a for a in range(len(shape)) if a not in positions]
        x = op(b, "permute_dims", x, positions + rest)
        positions = list(range(len(positions)))
        advanced = [(j, e) for j, (_, e) in enumerate(advanced)]
        shape = b.shape(x)
    first = positions[0]
    linear = None
    for p, e in advanced:
        index = _wrapped(b, e, shape[p])
        linear = index if linear is None else op(b, "add", op(b, "multiply", linear, _size_tensor(b, shape[p])), index)
    if len(positions) > 1:
        merged = _product([shape[p] for p in positions])
        x = op(b, "reshape", x, (*shape[:first], merged, *shape[positions[-1] + 1:]))
    if tuple(b.shape(linear)) != tuple(target):
        linear = op(b, "broadcast_to", linear, target)
    return op(b, "take", x, linear, first, "clip")  # in range already: clip only quiets TVM's warning


def _product(sizes):
    out = sizes[0]
    for s in sizes[1:]:
        out = out * s
    return out


def _check_known(b, e: Entry, size) -> None:
    """A list index checked against a static size, in torch's IndexError words (any index into an empty axis)."""
    if isinstance(size, int) and size == 0 and not any(isinstance(n, int) and n == 0 for n in b.shape(e.value)):
        raise Diagnostic(f"index is out of bounds for dimension {e.axis} with size 0")
    if e.known is None or not isinstance(size, int):
        return
    flat, stack = [], [e.known]
    while stack:
        item = stack.pop()
        stack.extend(item) if isinstance(item, (list, tuple)) else flat.append(item)
    bad = [i for i in flat if not -size <= i < size]
    if bad:
        raise Diagnostic(f"index {bad[0]} is out of bounds for dimension {e.axis} with size {size}")


def getitem(b, x, index):
    """`x[index]` with torch's meaning; a Diagnostic in torch's words for an index torch refuses."""
    entries = _parse(b, x, index)
    value, advanced = _basic(b, x, entries)
    return _advanced(b, value, advanced) if advanced else value


def is_view(b, x, index) -> bool:
    """Whether torch's `x[index]` is a view of x (basic indexing only)."""
    return not any(e.kind == "tensor" for e in _parse(b, x, index))


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
def cast(b, value, dtype: str):
    """A value written into a tensor of `dtype`, as a tensor converted as torch's copy_ converts it."""
    if b.is_tensor(value):
        return value if b.dtype(value) == dtype else op(b, "astype", value, dtype)
    if not isinstance(value, (bool, int, float)):
        raise Diagnostic(f"can only assign a tensor or a number into a tensor, got {b.describe(value)}")
    kind = DTYPES[dtype]
    return b.const(bool(value) if kind == torch.bool else value if kind.is_floating_point else int(value), dtype)


def _fitted(b, value, shape: tuple, what: str):
    """`value` broadcast to `shape` as torch's setitem broadcasts it (an error where it cannot)."""
    vshape = tuple(b.shape(value))
    while len(vshape) > len(shape) and isinstance(vshape[0], int) and vshape[0] == 1:
        value = op(b, "squeeze", value, [0])  # torch drops leading 1s of the value
        vshape = vshape[1:]
    fits = len(vshape) <= len(shape) and broadcast(vshape, shape) is not None and all(
        same_size(v, s) or isinstance(v, int) and v == 1 for v, s in zip(reversed(vshape), reversed(shape)))
    if not fits:
        raise Diagnostic(f"shape mismatch: value tensor of shape {format_shape(vshape)} cannot be broadcast to "
                         f"{what} of shape {format_shape(shape)}")
    return value


def _mask_entry(b, index):
    """(position, mask) when the index is a bool tensor after full slices (`m`, `(:, m)`, `(m, ...)`)."""
    items = list(index) if isinstance(index, tuple) else [index]
    while items and items[-1] is Ellipsis:
        items.pop()
    if not items or not b.is_tensor(items[-1]) or b.dtype(items[-1]) != "bool":
        return None
    lead = items[:-1]
    if not all(isinstance(i, slice) and i == slice(None) for i in lead):
        return None
    return len(lead), items[-1]


def _set_masked(b, x, position: int, mask, value):
    """`x[:, ..., mask] = value`: where the mask holds, value (which broadcasts over the masked axes)."""
    shape, mshape = tuple(b.shape(x)), tuple(b.shape(mask))
    covered = shape[position:position + len(mshape)]
    agree = all(same_size(m, s) or not (isinstance(m, int) and isinstance(s, int))  # symbolic: checked per call
                for m, s in zip(mshape, covered))
    if len(covered) < len(mshape) or not agree:
        raise Diagnostic(f"the shape of the mask {format_shape(mshape)} does not match the shape of the indexed "
                         f"tensor {format_shape(shape)} at dimension {position}")
    rest = shape[position + len(mshape):]
    vshape = tuple(b.shape(value))
    if len(vshape) > len(rest):
        if not (len(vshape) == len(rest) + 1 and isinstance(vshape[0], int) and vshape[0] == 1):
            raise Diagnostic(f"`x[mask] = value` takes a value that broadcasts to one selected element: a number or "
                             f"a tensor of shape {format_shape(rest)} (the mask selects a data-dependent number of "
                             f"elements), got {b.describe(value)}")
        value = op(b, "squeeze", value, [0])
    value = _fitted(b, value, rest, "each selected element")
    condition = op(b, "reshape", mask, (*mshape, *([1] * len(rest)))) if rest else mask
    return op(b, "where", condition, value, x)


def _axis_spread(b, size, begin, end, step):
    """For one axis of x: (mask of the positions a slice writes, the value index of each position)."""
    if all(isinstance(v, int) for v in (size, begin, end)):
        inside = [begin <= i < end and (i - begin) % step == 0 for i in range(size)]
        last = max(0, -(-(end - begin) // step) - 1)
        source = [min(max((i - begin) // step, 0), last) for i in range(size)]
        return op(b, "astype", b.index(inside), "bool"), b.index(source)
    shifted = op(b, "arange", -begin, size - begin, 1, "int64")   # i - begin
    ahead = op(b, "arange", -end, size - end, 1, "int64")         # i - end
    mask = op(b, "logical_and", op(b, "greater_equal", shifted, 0), op(b, "less", ahead, 0))
    if step != 1:
        mask = op(b, "logical_and", mask, op(b, "equal", op(b, "floor_mod", shifted, step), 0))
        shifted = op(b, "floor_divide", shifted, step)
    return mask, op(b, "where", mask, shifted, 0)


def _set_basic(b, x, entries: list[Entry], value):
    """x with the region that ints and slices select replaced by value (broadcast as torch does):
    the value spread over x's axes by `take`, chosen by a mask (`where`), both differentiable."""
    region, _ = _basic(b, x, entries)
    rshape = tuple(b.shape(region))
    value = _fitted(b, value, rshape, "indexing result")
    if any(isinstance(s, int) and s == 0 for s in rshape):
        return x  # an empty region writes nothing
    if tuple(b.shape(value)) != rshape:
        value = op(b, "broadcast_to", value, rshape)
    position = 0
    for e in entries:  # the value in x's axes: new axes dropped, indexed ones back as size 1
        if e.kind == "new":
            value = op(b, "squeeze", value, [position])
        elif e.kind == "int":
            value = op(b, "expand_dims", value, position)
            position += 1
        else:
            position += 1
    shape, mask = b.shape(x), None
    for e in entries:
        if e.kind not in ("int", "slice"):
            continue
        begin, end, step = _bounds(shape[e.axis], e)
        if _is_full(shape[e.axis], begin, end, step):
            continue
        axis_mask, source = _axis_spread(b, shape[e.axis], begin, end, step)
        if e.kind == "slice":
            value = op(b, "take", value, source, e.axis, "clip")
        axis_mask = op(b, "reshape", axis_mask, [shape[a] if a == e.axis else 1 for a in range(len(shape))])
        mask = axis_mask if mask is None else op(b, "logical_and", mask, axis_mask)
    if mask is None:  # the whole tensor
        return value
    return op(b, "where", mask, value, x)


def _set_advanced(b, x, index, value):
    """x with the elements an index with integer tensors selects replaced: scattered by their positions."""
    shape = tuple(b.shape(x))
    count = _product(list(shape)) if shape else 1
    positions = op(b, "reshape", op(b, "arange", 0, count, 1, "int64"), shape)
    region = getitem(b, positions, index)
    rshape = tuple(b.shape(region))
    if b.is_tensor(value):
        value = _fitted(b, value, rshape, "indexing result")
    value = op(b, "broadcast_to", value, rshape)
    flat = op(b, "reshape", x, (count,))
    written = op(b, "scatter_elements", flat, op(b, "reshape", region, (-1,)), op(b, "reshape", value, (-1,)), 0)
    return op(b, "reshape", written, shape)


def setitem(b, x, index, value):
    """The tensor `x` becomes after torch's `x[index] = value` (value cast to x's dtype, broadcast)."""
    masked = _mask_entry(b, index)
    value = cast(b, value, b.dtype(x))
    if masked is not None:
        return _set_masked(b, x, masked[0], masked[1], value)
    entries = _parse(b, x, index)
    if any(e.kind == "tensor" for e in entries):
        return _set_advanced(b, x, index, value)
    return _set_basic(b, x, entries, value)
