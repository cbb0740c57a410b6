"""Views and shape changes as torch spells them: view, reshape, transpose, permute, unsqueeze, expand,
cat, split, gather, ... Each is built from the library's reshape/permute_dims/strided_slice/concat/...,
so symbolic sizes (TIR expressions in `b.shape`) go through; a size condition that depends on them
is checked when the code runs (`require`)."""
from __future__ import annotations

import functools
import math

import torch
import tvm

from ...core.errors import Diagnostic
from .. import library
from ...core.types import DTYPES, TORCH_TO_NAME
from ..values import broadcast, is_symbolic, same_size
from .registry import dim as _dim, dims as _dims, op, tensor, torch_property, torch_rule  # (rules take `dim`)


# ----------------------------------------------------------------------------------------------
# sizes: ints, or symbolic sizes (TIR expressions) in compiled code
# ----------------------------------------------------------------------------------------------
def is_size(value) -> bool:
    """An int size, or a symbolic one."""
    return isinstance(value, int) and not isinstance(value, bool) or is_symbolic(value)


def sizes(b, args, where: str) -> list:
    """torch's sizes given as varargs (`view(2, 3)`) or as one sequence (`view((2, 3))`, `view(x.shape)`)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for s in args:
        if not is_size(s):
            raise Diagnostic(f"{where}: sizes must be ints (or sizes read from a shape), got {b.describe(s)}")
    return list(args)


def _prim(value):
    """A size as a TIR expression (int64 for ints)."""
    return tvm.tirx.const(value, "int64") if isinstance(value, int) else value


def require(b, condition, message: str) -> None:
    """A condition on sizes: a Diagnostic when it fails; over symbolic sizes, one when it can never hold,
    and a check made when the compiled code runs when it holds for some sizes only."""
    if not is_symbolic(condition):
        if not condition:
            raise Diagnostic(message)
        return
    analyzer = tvm.sym.Analyzer()
    sizes_nonnegative = [v >= 0 for v in tvm.tirx.analysis.undefined_vars(condition)]
    with analyzer.constraint_scope(tvm.tirx.all(*sizes_nonnegative) if sizes_nonnegative else tvm.tirx.const(True)):
        condition = analyzer.simplify(condition)
        if analyzer.can_prove(tvm.tirx.Not(condition)):
            raise Diagnostic(message)
        if analyzer.can_prove(condition):
            return
    library.run_time_check(b.cg, condition, message.replace("{", "(").replace("}", ")"))


def equal(a, c):
    """`a == c` for sizes: a bool for ints, a TIR condition for symbolic sizes."""
    return a == c if isinstance(a, int) and isinstance(c, int) else tvm.tirx.EQ(_prim(a), _prim(c))


def at_most(a, c):
    """`a <= c` for sizes: a bool for ints, a TIR condition for symbolic sizes."""
    return a <= c if isinstance(a, int) and isinstance(c, int) else _prim(a) <= _prim(c)


def static(b, size, where: str) -> int:
    """A size that must be known at compile time (the number of results depends on it)."""
    if not isinstance(size, int):
        raise Diagnostic(f"{where} needs the size of that dim at compile time (the number or sizes of its "
                         f"results depend on it), got the symbolic size {size}")
    return size


def shape_text(shape) -> str:
    """A shape as torch's messages write it: [2, 3]."""
    return "[" + ", ".join(str(s) for s in shape) + "]"


def reshaped(b, x, shape):
    """x with `shape` (the library's reshape: -1 inferred, sizes checked), or x itself when unchanged."""
    shape = list(shape)
    if len(shape) == b.ndim(x) and all(same_size(s, t) for s, t in zip(shape, b.shape(x))):
        return x
    return op(b, "reshape", x, shape)


def permuted(b, x, axes):
    """x with its dims in `axes`' order, or x itself when unchanged."""
    return x if list(axes) == list(range(b.ndim(x))) else op(b, "permute_dims", x, list(axes))


def sliced(b, x, axis: int, begin, end, step: int = 1):
    """x[begin:end:step] along `axis` (bounds already checked)."""
    if begin == 0 and step == 1 and same_size(end, b.shape(x)[axis]):
        return x
    return op(b, "strided_slice", x, [axis], [begin], [end], [step] if step != 1 else None)


# ----------------------------------------------------------------------------------------------
# views: reshape, flatten, squeeze, permute
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.reshape, torch.Tensor.reshape, methods=("reshape",))
def reshape(b, input, *sizes_, shape=None):
    """torch.reshape(x, shape) and x.reshape(*sizes): -1 inferred, symbolic sizes allowed."""
    x = tensor(b, input, "torch.reshape()")
    if shape is not None and sizes_:
        raise Diagnostic("torch.reshape(): give the shape once (positionally or as shape=)")
    return op(b, "reshape", x, sizes(b, sizes_ if shape is None else (shape,), "torch.reshape()"))


@torch_rule(torch.Tensor.view, methods=("view",), name="Tensor.view")
def view(b, input, *sizes_, size=None):
    """x.view(*sizes); a view's sharing of storage does not matter here (tensors are values)."""
    x = tensor(b, input, "Tensor.view()")
    given = sizes_ if size is None else (size,)
    if len(given) == 1 and not is_size(given[0]) and not isinstance(given[0], (tuple, list)):
        raise Diagnostic(f"Tensor.view(dtype) (reinterpreting the bits) is not supported in @jit code; "
                         f"got {b.describe(given[0])}; convert values with .to(dtype)")
    return op(b, "reshape", x, sizes(b, given, "Tensor.view()"))


@torch_rule(torch.Tensor.view_as, torch.Tensor.reshape_as, methods=("view_as", "reshape_as"), name="Tensor.view_as")
def view_as(b, input, other):
    """x.view_as(other) / x.reshape_as(other): x with other's shape."""
    x, o = tensor(b, input, "Tensor.view_as()"), tensor(b, other, "Tensor.view_as()")
    return op(b, "reshape", x, list(b.shape(o)))


@torch_rule(torch.Tensor.contiguous, methods=("contiguous",), name="Tensor.contiguous")
def contiguous(b, input, memory_format=torch.contiguous_format):
    """The value itself: compiled tensors have one layout."""
    if memory_format is not torch.contiguous_format:
        raise Diagnostic(f"Tensor.contiguous(): memory_format={memory_format} is not supported in @jit code")
    return tensor(b, input, "Tensor.contiguous()")


@torch_rule(torch.flatten, torch.Tensor.flatten, methods=("flatten",))
def flatten(b, input, start_dim=0, end_dim=-1):
    """Dims start_dim..end_dim made one (a 0-d tensor becomes 1-d)."""
    x = tensor(b, input, "torch.flatten()")
    if b.ndim(x) == 0:
        return op(b, "reshape", x, [1])
    start, end = _dim(b, x, start_dim, "torch.flatten()"), _dim(b, x, end_dim, "torch.flatten()")
    if start > end:
        raise Diagnostic("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = list(b.shape(x))
    return reshaped(b, x, shape[:start] + [math.prod(shape[start:end + 1])] + shape[end + 1:])


@torch_rule(torch.unflatten, torch.Tensor.unflatten, methods=("unflatten",))
def unflatten(b, input, dim, sizes_):
    """One dim split into `sizes_` (one of which may be -1)."""
    x = tensor(b, input, "torch.unflatten()")
    d = _dim(b, x, dim, "torch.unflatten()")
    new = sizes(b, (sizes_,), "torch.unflatten()")
    if not new:
        raise Diagnostic("unflatten: sizes must be non-empty")
    shape = list(b.shape(x))
    message = (f"unflatten: Provided sizes {shape_text(new)} don't multiply up to the size of dim {dim} "
               f"({shape[d]}) in the input tensor")
    inferred = [i for i, s in enumerate(new) if isinstance(s, int) and s == -1]
    if inferred:  # within the dim (a reshape of the whole tensor could not tell it when the tensor is empty)
        known = math.prod(s for i, s in enumerate(new) if i != inferred[0])
        require(b, tvm.tirx.NE(_prim(known), _prim(0)) if is_symbolic(known) else known != 0, message)
        require(b, equal(shape[d] % known, 0), message)
        new[inferred[0]] = shape[d] // known
    require(b, equal(math.prod(new), shape[d]), message)
    return op(b, "reshape", x, shape[:d] + new + shape[d + 1:])


@torch_rule(torch.unsqueeze, torch.Tensor.unsqueeze, methods=("unsqueeze",))
def unsqueeze(b, input, dim):
    """A dim of size 1 inserted at `dim`."""
    x = tensor(b, input, "torch.unsqueeze()")
    return op(b, "expand_dims", x, _dim(b, x, dim, "torch.unsqueeze()", extra=1))


@torch_rule(torch.squeeze, torch.Tensor.squeeze, methods=("squeeze",))
def squeeze(b, input, dim=None):
    """The dims of size 1 among those given (all by default) removed; others left."""
    x = tensor(b, input, "torch.squeeze()")
    given = dim
    if b.ndim(x) == 0:
        _dims(b, x, given, "torch.squeeze()")  # checks the dims
        return x
    axes = range(b.ndim(x)) if given is None else _dims(b, x, given, "torch.squeeze()")
    shape = b.shape(x)
    for a in axes:
        if not isinstance(shape[a], int):
            raise Diagnostic(f"torch.squeeze(): dim {a} has the symbolic size {shape[a]}, so whether it is 1 "
                             "(and squeezed) is known only when the code runs; use reshape() instead")
    drop = sorted({a for a in axes if shape[a] == 1})
    return op(b, "squeeze", x, drop) if drop else x


@torch_rule(torch.permute, torch.Tensor.permute, methods=("permute",))
def permute(b, input, *dims_, dims=None):
    """x.permute(*dims) or torch.permute(x, dims)."""
    x = tensor(b, input, "torch.permute()")
    given = dims_ if dims is None else (dims,)
    order = given[0] if len(given) == 1 and isinstance(given[0], (tuple, list)) else given
    if len(order) != b.ndim(x):
        raise Diagnostic("permute(): number of dimensions in the tensor input does not match the length of the "
                         f"desired ordering of dimensions i.e. input.dim() = {b.ndim(x)} is not equal to "
                         f"len(dims) = {len(order)}")
    axes = [_dim(b, x, d, "torch.permute()") for d in order]
    if len(set(axes)) != len(axes):
        raise Diagnostic("permute(): duplicate dims are not allowed.")
    return permuted(b, x, axes)


@torch_rule(torch.transpose, torch.swapdims, torch.Tensor.transpose, torch.Tensor.swapdims,
            methods=("transpose", "swapdims"))
def transpose(b, input, dim0, dim1):
    """Two dims swapped (also torch.swapdims)."""
    x = tensor(b, input, "torch.transpose()")
    axes = list(range(b.ndim(x)))
    i, j = _dim(b, x, dim0, "torch.transpose()"), _dim(b, x, dim1, "torch.transpose()")
    axes[i], axes[j] = axes[j], axes[i]
    return permuted(b, x, axes)


@torch_rule(torch.swapaxes, torch.Tensor.swapaxes, methods=("swapaxes",))
def swapaxes(b, input, axis0, axis1):
    """torch.swapaxes: transpose in numpy's words."""
    return transpose(b, input, axis0, axis1)


@torch_rule(torch.t, torch.Tensor.t, methods=("t",))
def t(b, input):
    """The transpose of a matrix; a 0-d or 1-d tensor as it is."""
    x = tensor(b, input, "torch.t()")
    if b.ndim(x) > 2:
        raise Diagnostic(f"t() expects a tensor with <= 2 dimensions, but self is {b.ndim(x)}D")
    return transpose(b, x, 0, 1) if b.ndim(x) == 2 else x


@torch_property("mT")
def matrix_transpose(b, x):
    """x.mT: the last two dims swapped."""
    if b.ndim(x) < 2:
        raise Diagnostic(f"tensor.mT is only supported on matrices or batches of matrices. Got {b.ndim(x)}-D tensor.")
    return transpose(b, x, -2, -1)


@torch_rule(torch.movedim, torch.moveaxis, torch.Tensor.movedim, torch.Tensor.moveaxis,
            methods=("movedim", "moveaxis"))
def movedim(b, input, source, destination):
    """The dims `source` moved to `destination`, the others kept in their order."""
    x = tensor(b, input, "torch.movedim()")
    src = _dims(b, x, source, "torch.movedim()")
    dst = _dims(b, x, destination, "torch.movedim()")
    if len(src) != len(dst):
        raise Diagnostic(f"movedim: Invalid source or destination dims: source ({src} dims) should "
                         f"contain the same number of dims as destination ({dst} dims)")
    for name, got in (("source", src), ("destination", dst)):
        if len(set(got)) != len(got):
            raise Diagnostic(f"movedim: repeated dim in `{name}` ({got})")
    order = [None] * b.ndim(x)
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(a for a in range(b.ndim(x)) if a not in src)
    return permuted(b, x, [a if a is not None else next(rest) for a in order])


@torch_rule(torch.diagonal, torch.Tensor.diagonal, methods=("diagonal",))
def diagonal(b, input, offset=0, dim1=0, dim2=1):
    """The diagonal of dims (dim1, dim2) as a last dim: the two dims flattened, every (m+1)-th element."""
    x = tensor(b, input, "torch.diagonal()")
    d1, d2 = _dim(b, x, dim1, "torch.diagonal()"), _dim(b, x, dim2, "torch.diagonal()")
    if d1 == d2:
        raise Diagnostic(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    x = movedim(b, x, (d1, d2), (-2, -1))
    n, m = (static(b, s, "torch.diagonal()") for s in b.shape(x)[-2:])
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = op(b, "reshape", x, [*b.shape(x)[:-2], n * m])
    if length == 0:
        return sliced(b, flat, b.ndim(flat) - 1, 0, 0)
    return sliced(b, flat, b.ndim(flat) - 1, start, start + (length - 1) * (m + 1) + 1, m + 1)


# ----------------------------------------------------------------------------------------------
# expand, repeat, tile
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.Tensor.expand, methods=("expand",), name="Tensor.expand")
def expand(b, input, *sizes_, size=None):
    """x broadcast to the sizes: -1 keeps a size; new dims lead."""
    x = tensor(b, input, "Tensor.expand()")
    return _expanded(b, x, sizes(b, sizes_ if size is None else (size,), "Tensor.expand()"))


def _expanded(b, x, target: list):
    """x broadcast to `target` by torch's expand rule (-1 keeps a size; new dims lead; a size 1 stretches)."""
    shape = list(b.shape(x))
    lead = len(target) - len(shape)
    if lead < 0:
        raise Diagnostic(f"expand(size={shape_text(target)}): the number of sizes provided ({len(target)}) must be "
                         f"greater or equal to the number of dimensions in the tensor ({len(shape)})")
    out = []
    for i, want in enumerate(target):
        if isinstance(want, int) and want < -1 or i < lead and isinstance(want, int) and want == -1:
            raise Diagnostic(f"The expanded size of the tensor ({want}) isn't allowed in a leading, "
                             f"non-existing dimension {i}" if want == -1 else
                             f"expand(): invalid size {want} at index {i} of {shape_text(target)}")
        have = shape[i - lead] if i >= lead else None
        if i >= lead and (isinstance(want, int) and want == -1 or same_size(have, want)):
            out.append(have)
        elif i < lead or isinstance(have, int) and have == 1:
            out.append(want)
        else:
            require(b, equal(have, want), f"The expanded size of the tensor ({want}) must match the existing "
                    f"size ({have}) at non-singleton dimension {i}.  Target sizes: {shape_text(target)}.  "
                    f"Tensor sizes: {shape_text(shape)}")
            out.append(have)
    if len(out) == len(shape) and all(same_size(o, s) for o, s in zip(out, shape)):
        return x
    return op(b, "broadcast_to", x, out)


@torch_rule(torch.Tensor.expand_as, methods=("expand_as",), name="Tensor.expand_as")
def expand_as(b, input, other):
    """x expanded to other's shape."""
    return _expanded(b, tensor(b, input, "Tensor.expand_as()"), list(b.shape(tensor(b, other, "Tensor.expand_as()"))))


@torch_rule(torch.broadcast_to, torch.Tensor.broadcast_to, methods=("broadcast_to",))
def broadcast_to(b, input, size):
    """torch.broadcast_to: expand's rule."""
    return _expanded(b, tensor(b, input, "torch.broadcast_to()"), sizes(b, (size,), "torch.broadcast_to()"))


def _repeats(b, given, where: str) -> list:
    """Repeat counts, which must be non-negative ints."""
    reps = sizes(b, given, where)
    for r in reps:
        if not isinstance(r, int) or r < 0:
            raise Diagnostic(f"{where}: repeats must be non-negative ints, got {r}")
    return reps


@torch_rule(torch.Tensor.repeat, methods=("repeat",), name="Tensor.repeat")
def repeat(b, input, *sizes_):
    """x tiled: as many repeats as dims or more (new dims lead)."""
    x = tensor(b, input, "Tensor.repeat()")
    reps = _repeats(b, sizes_, "Tensor.repeat()")
    if len(reps) < b.ndim(x):
        raise Diagnostic("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    return op(b, "tile", x, reps)


@torch_rule(torch.tile, torch.Tensor.tile, methods=("tile",))
def tile(b, input, *dims_, dims=None):
    """torch.tile: Tensor.repeat with missing leading repeats taken as 1."""
    x = tensor(b, input, "torch.tile()")
    reps = _repeats(b, dims_ if dims is None else (dims,), "torch.tile()")
    return op(b, "tile", x, [1] * (b.ndim(x) - len(reps)) + reps)


@torch_rule(torch.repeat_interleave, torch.Tensor.repeat_interleave, methods=("repeat_interleave",))
def repeat_interleave(b, input, repeats=None, dim=None, *, output_size=None):
    """Each element repeated `repeats` (an int) times along dim (the flattened tensor by default)."""
    x = tensor(b, input, "torch.repeat_interleave()")
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        raise Diagnostic(f"torch.repeat_interleave(): repeats must be an int here, got {b.describe(repeats)} "
                         "(repeats given as a tensor would make the result's size depend on its values)")
    (count,) = _repeats(b, (repeats,), "torch.repeat_interleave()")
    if dim is None:
        return op(b, "repeat", flatten(b, x), count, 0)
    return op(b, "repeat", x, count, _dim(b, x, dim, "torch.repeat_interleave()"))


# ----------------------------------------------------------------------------------------------
# pieces: chunk, split, unbind, select, narrow
# ----------------------------------------------------------------------------------------------
def _pieces(b, x, axis: int, lengths: list) -> tuple:
    """x cut along `axis` into consecutive pieces of these lengths."""
    out, start = [], 0
    for length in lengths:
        out.append(sliced(b, x, axis, start, start + length))
        start = start + length
    return tuple(out)


@torch_rule(torch.chunk, torch.Tensor.chunk, methods=("chunk",))
def chunk(b, input, chunks, dim=0):
    """torch's rule: pieces of ceil(size / chunks), so possibly fewer than `chunks`."""
    x = tensor(b, input, "torch.chunk()")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks <= 0:
        raise Diagnostic(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    axis = _dim(b, x, dim, "torch.chunk()")
    size = static(b, b.shape(x)[axis], "torch.chunk()")
    if size == 0:
        return (x,) * chunks
    return split(b, x, -(-size // chunks), axis)


@torch_rule(torch.split, torch.Tensor.split, methods=("split",))
def split(b, tensor_, split_size_or_sections, dim=0):
    """Pieces of one size (the last smaller), or of the sizes listed (which sum to the dim's size)."""
    x = tensor(b, tensor_, "torch.split()")
    axis = _dim(b, x, dim, "torch.split()")
    size = b.shape(x)[axis]
    if isinstance(split_size_or_sections, (tuple, list)):
        lengths = sizes(b, (split_size_or_sections,), "torch.split()")
        require(b, equal(sum(lengths), size), f"split_with_sizes expects split_sizes to sum exactly to {size} "
                f"(input tensor's size at dimension {axis}), but got split_sizes={shape_text(lengths)}")
        return _pieces(b, x, axis, lengths)
    step = split_size_or_sections
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise Diagnostic(f"torch.split(): split_size must be a non-negative int or a list of ints, "
                         f"got {b.describe(step)}")
    size = static(b, size, "torch.split()")
    if step == 0:
        if size:
            raise Diagnostic(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
        return (x,)
    return _pieces(b, x, axis, [min(step, size - s) for s in range(0, size, step)] or [0])


@torch_rule(torch.tensor_split, torch.Tensor.tensor_split, methods=("tensor_split",))
def tensor_split(b, input, indices_or_sections, dim=0):
    """n nearly equal pieces (the first size % n one longer), or the pieces between the indices given."""
    x = tensor(b, input, "torch.tensor_split()")
    axis = _dim(b, x, dim, "torch.tensor_split()")
    size = static(b, b.shape(x)[axis], "torch.tensor_split()")
    cuts = indices_or_sections
    if isinstance(cuts, (tuple, list)):
        bounds = [0, *sizes(b, (cuts,), "torch.tensor_split()"), size]
        spans = [range(*slice(lo, hi).indices(size)) for lo, hi in zip(bounds, bounds[1:])]
        return tuple(sliced(b, x, axis, s.start, max(s.start, s.stop)) for s in spans)
    if isinstance(cuts, bool) or not isinstance(cuts, int) or cuts <= 0:
        raise Diagnostic(f"number of sections must be larger than 0, got {cuts}")
    q, r = divmod(size, cuts)
    return _pieces(b, x, axis, [q + 1] * r + [q] * (cuts - r))


@torch_rule(torch.select, torch.Tensor.select, methods=("select",))
def select(b, input, dim, index):
    """x[..., index, ...] along dim (that dim removed)."""
    x = tensor(b, input, "torch.select()")
    axis = _dim(b, x, dim, "torch.select()")
    size = b.shape(x)[axis]
    if isinstance(index, bool) or not isinstance(index, int):
        raise Diagnostic(f"torch.select(): index must be an int, got {b.describe(index)}")
    start = index if index >= 0 else size + index
    require(b, at_most(0, start) if index < 0 else at_most(index + 1, size),
            f"select(): index {index} out of range for tensor of size {shape_text(b.shape(x))} at dimension {axis}")
    return op(b, "squeeze", sliced(b, x, axis, start, start + 1), [axis])


@torch_rule(torch.unbind, torch.Tensor.unbind, methods=("unbind",))
def unbind(b, input, dim=0):
    """The slices along dim, that dim removed (a static size)."""
    x = tensor(b, input, "torch.unbind()")
    axis = _dim(b, x, dim, "torch.unbind()")
    return tuple(select(b, x, axis, i) for i in range(static(b, b.shape(x)[axis], "torch.unbind()")))


@torch_rule(torch.narrow, torch.Tensor.narrow, methods=("narrow",))
def narrow(b, input, dim, start, length):
    """`length` elements from `start` along dim."""
    x = tensor(b, input, "torch.narrow()")
    axis = _dim(b, x, dim, "torch.narrow()")
    size = b.shape(x)[axis]
    for name, value in (("start", start), ("length", length)):
        if not is_size(value):
            raise Diagnostic(f"torch.narrow(): {name} must be an int (or a size), got {b.describe(value)}")
    if isinstance(length, int) and length < 0:
        raise Diagnostic("narrow(): length must be non-negative.")
    if isinstance(start, int) and start < 0:
        require(b, at_most(0, start + size), f"start out of range (got {start} for a dimension of size {size})")
        start = start + size
    require(b, at_most(start + length, size), f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return sliced(b, x, axis, start, start + length)


# ----------------------------------------------------------------------------------------------
# joining: cat, stack
# ----------------------------------------------------------------------------------------------
def _tensors(b, tensors, where: str) -> list:
    """A non-empty tuple or list of tensors, as cat/stack take it."""
    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise Diagnostic(f"{where}: expected a non-empty tuple or list of tensors, got {b.describe(tensors)}")
    for i, t in enumerate(tensors):
        if not b.is_tensor(t):
            raise Diagnostic(f"{where}: expected a tuple of tensors, but element {i} is {b.describe(t)}")
    return list(tensors)


def _promoted(b, items: list) -> list:
    """The tensors in the dtype torch.cat/stack give: torch.promote_types of theirs."""
    dtype = TORCH_TO_NAME[functools.reduce(torch.promote_types, [DTYPES[b.dtype(t)] for t in items])]
    return [b.as_tensor(t, dtype) for t in items]


@torch_rule(torch.cat, torch.concat, torch.concatenate, methods=(), name="torch.cat")
def cat(b, tensors, dim=0, *, axis=None, out=None):
    """torch.cat: dtypes promoted; 1-d tensors of size 0 skipped (torch's legacy rule). `axis=`: numpy's spelling,
    which torch takes too."""
    items = _promoted(b, _tensors(b, tensors, "torch.cat()"))
    dim = dim if axis is None else axis
    if out is not None:
        raise Diagnostic("torch.cat(): out= is not supported in @jit code; use the result")
    kept = [t for t in items if not (b.ndim(t) == 1 and same_size(b.shape(t)[0], 0))] or items[:1]
    for i, t in enumerate(kept):
        if b.ndim(t) == 0:
            raise Diagnostic(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
        if b.ndim(t) != b.ndim(kept[0]):
            raise Diagnostic(f"Tensors must have same number of dimensions: got {b.ndim(kept[0])} and {b.ndim(t)}")
    axis = _dim(b, kept[0], dim, "torch.cat()")
    for i, t in enumerate(kept[1:], 1):
        for a, (want, got) in enumerate(zip(b.shape(kept[0]), b.shape(t))):
            if a != axis and not same_size(want, got):
                require(b, equal(want, got), f"Sizes of tensors must match except in dimension {axis}. "
                        f"Expected size {want} but got size {got} for tensor number {i} in the list.")
    return kept[0] if len(kept) == 1 else op(b, "concat", kept, axis)


@torch_rule(torch.stack, methods=())
def stack(b, tensors, dim=0, *, axis=None, out=None):
    """The tensors (of one shape) along a new dim."""
    items = _promoted(b, _tensors(b, tensors, "torch.stack()"))
    dim = dim if axis is None else axis
    if out is not None:
        raise Diagnostic("torch.stack(): out= is not supported in @jit code; use the result")
    first = b.shape(items[0])
    for i, t in enumerate(items[1:], 1):
        if len(b.shape(t)) != len(first) or not all(same_size(p, q) for p, q in zip(first, b.shape(t))):
            message = (f"stack expects each tensor to be equal size, but got {shape_text(first)} at entry 0 "
                       f"and {shape_text(b.shape(t))} at entry {i}")
            if len(b.shape(t)) != len(first):
                raise Diagnostic(message)
            for p, q in zip(first, b.shape(t)):
                require(b, equal(p, q), message)
    axis = _dim(b, items[0], dim, "torch.stack()", extra=1)
    return cat(b, [op(b, "expand_dims", t, axis) for t in items], axis)


def _at_least(b, x, rank: int):
    """torch.atleast_1d/2d: leading dims of size 1 added."""
    return x if b.ndim(x) >= rank else op(b, "reshape", x, [1] * (rank - b.ndim(x)) + list(b.shape(x)))


@torch_rule(torch.hstack, methods=())
def hstack(b, tensors):
    """Concatenated along dim 1 (dim 0 for 1-d tensors)."""
    items = [_at_least(b, t, 1) for t in _tensors(b, tensors, "torch.hstack()")]
    return cat(b, items, 0 if all(b.ndim(t) == 1 for t in items) else 1)


@torch_rule(torch.vstack, torch.row_stack, methods=())
def vstack(b, tensors):
    """Concatenated along dim 0, 1-d tensors as rows."""
    return cat(b, [_at_least(b, t, 2) for t in _tensors(b, tensors, "torch.vstack()")], 0)


# ----------------------------------------------------------------------------------------------
# reorder: flip, roll, tril/triu
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.flip, torch.Tensor.flip, methods=("flip",))
def flip(b, input, *dims_, dims=None):
    """The order of elements reversed along each of dims."""
    x = tensor(b, input, "torch.flip()")
    given = dims_ if dims is None else (dims,)
    axes = _dims(b, x, list(given[0]) if len(given) == 1 and isinstance(given[0], (tuple, list)) else list(given),
                "torch.flip()") if b.ndim(x) else []
    for a in axes:
        if axes.count(a) > 1:
            raise Diagnostic(f"dim {a} appears multiple times in the list of dims")
    for a in axes:
        x = op(b, "flip", x, a)
    return x


@torch_rule(torch.roll, torch.Tensor.roll, methods=("roll",))
def roll(b, input, shifts, dims=None):
    """Elements shifted along dims (wrapping round): the two slices swapped. No dims: the flattened tensor."""
    x = tensor(b, input, "torch.roll()")
    shift_list = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    if dims is None:
        if len(shift_list) != 1:
            raise Diagnostic(f"shifts and dimensions must align. shifts: {len(shift_list)}, dims:0")
        return op(b, "reshape", roll(b, flatten(b, x), shift_list, [0]), list(b.shape(x)))
    axes = _dims(b, x, dims, "torch.roll()")
    if len(shift_list) != len(axes):
        raise Diagnostic(f"shifts and dimensions must align. shifts: {len(shift_list)}, dims:{len(axes)}")
    for shift, axis in zip(shift_list, axes):
        if isinstance(shift, bool) or not isinstance(shift, int):
            raise Diagnostic(f"torch.roll(): shifts must be ints, got {b.describe(shift)}")
        size = static(b, b.shape(x)[axis], "torch.roll()")
        k = shift % size if size else 0
        if k:
            x = cat(b, [sliced(b, x, axis, size - k, size), sliced(b, x, axis, 0, size - k)], axis)
    return x


def _triangle(name: str):
    """torch.tril / torch.triu: the library op of the same name on the last two dims."""
    def rule(b, input, diagonal=0):
        x = tensor(b, input, f"torch.{name}()")
        if b.ndim(x) < 2:
            raise Diagnostic(f"{name}: input tensor must have at least 2 dimensions")
        if isinstance(diagonal, bool) or not isinstance(diagonal, int):
            raise Diagnostic(f"torch.{name}(): diagonal must be an int, got {b.describe(diagonal)}")
        return op(b, name, x, diagonal)
    rule.__name__ = name
    return rule


for _name in ("tril", "triu"):
    torch_rule(getattr(torch, _name), getattr(torch.Tensor, _name), methods=(_name,))(_triangle(_name))


# ----------------------------------------------------------------------------------------------
# indexing: gather, take_along_dim, index_select
# ----------------------------------------------------------------------------------------------
def _index(b, index, where: str, name: str = "index"):
    """An integer index tensor, as gather/index_select take it."""
    if not b.is_tensor(index) or b.dtype(index) not in ("int64", "int32", "int16", "int8", "uint8"):
        raise Diagnostic(f"{where}: {name} must be an integer tensor, got {b.describe(index)}")
    return index


@torch_rule(torch.gather, torch.Tensor.gather, methods=("gather",))
def gather(b, input, dim, index, *, sparse_grad=False):
    """out[i][j] = input[index[i][j]][j] (dim 0): index no larger than input apart from dim."""
    x = tensor(b, input, "torch.gather()")
    index = _index(b, index, "torch.gather()")
    axis = _dim(b, x, dim, "torch.gather()")
    if sparse_grad:
        raise Diagnostic("torch.gather(): sparse_grad=True is not supported in @jit code")
    if b.ndim(index) != b.ndim(x):
        raise Diagnostic("Index tensor must have the same number of dimensions as input tensor")
    message = (f"Size does not match at dimension {{}} expected index {shape_text(b.shape(index))} to be no "
               f"larger than self {shape_text(b.shape(x))} apart from dimension {axis}")
    for a, (have, want) in enumerate(zip(b.shape(x), b.shape(index))):
        if a != axis and not same_size(have, want):
            require(b, at_most(want, have), message.format(a))
    return op(b, "gather_elements", x, index, axis)


@torch_rule(torch.take_along_dim, torch.Tensor.take_along_dim, methods=("take_along_dim",))
def take_along_dim(b, input, indices, dim=None):
    """gather after broadcasting input and indices in every dim but `dim` (no dim: the flattened tensors)."""
    x = tensor(b, input, "torch.take_along_dim()")
    index = _index(b, indices, "torch.take_along_dim()", "indices")
    if dim is None:
        return gather(b, flatten(b, x), 0, flatten(b, index))
    axis = _dim(b, x, dim, "torch.take_along_dim()")
    if b.ndim(index) != b.ndim(x):
        raise Diagnostic("torch.take_along_dim(): input and indices should have the same number of dimensions, "
                         f"but got {b.ndim(x)} dimensions for input, and {b.ndim(index)} dimensions for indices")
    xs, js = list(b.shape(x)), list(b.shape(index))
    common = broadcast(tuple(xs[:axis] + [1] + xs[axis + 1:]), tuple(js[:axis] + [1] + js[axis + 1:]))
    if common is None:
        raise Diagnostic(f"torch.take_along_dim(): shapes {shape_text(xs)} and {shape_text(js)} do not broadcast "
                         f"apart from dim {axis}")
    x = _expanded(b, x, [*common[:axis], xs[axis], *common[axis + 1:]])
    index = _expanded(b, index, [*common[:axis], js[axis], *common[axis + 1:]])
    return op(b, "gather_elements", x, index, axis)


@torch_rule(torch.index_select, torch.Tensor.index_select, methods=("index_select",))
def index_select(b, input, dim, index):
    """The entries `index` (a vector) of dim."""
    x = tensor(b, input, "torch.index_select()")
    index = _index(b, index, "torch.index_select()")
    if b.ndim(index) > 1:
        raise Diagnostic("index_select(): Index is supposed to be a vector")
    axis = _dim(b, x, dim, "torch.index_select()") if b.ndim(x) else 0
    if b.ndim(x) == 0:
        return op(b, "reshape", x, [])
    return op(b, "take", x, reshaped(b, index, [-1]) if b.ndim(index) == 0 else index, axis)


# ----------------------------------------------------------------------------------------------
# einsum: operands contracted pairwise, left to right, each pair as one batched matmul
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.einsum, methods=())
def einsum(b, equation, *operands):
    """torch.einsum in general (implicit output, `...`, any number of operands, size-1 broadcasting)."""
    if not isinstance(equation, str):
        raise Diagnostic(f"torch.einsum(): the equation must be a string, got {b.describe(equation)}")
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = tuple(operands[0])
    items = [tensor(b, x, "torch.einsum()") for x in operands]
    dtype = _einsum_dtype(b, equation, items)
    terms, output = _einsum_labels(b, equation.replace(" ", ""), items)
    pending = [_sum_out(b, x, labels, set(output) | {l for k, t in enumerate(terms) if k != i for l in t})
               for i, (x, labels) in enumerate(zip(items, terms))]
    while len(pending) > 1:
        needed = set(output) | {l for _, labels in pending[2:] for l in labels}
        pending[:2] = [_contract(b, *pending[0], *pending[1], needed)]
    x, labels = _sum_out(b, *pending[0], set(output))
    x = permuted(b, x, [labels.index(l) for l in output])
    return b.as_tensor(x, dtype)


def _einsum_dtype(b, equation: str, items: list) -> str:
    """The result's dtype, and the equation's mistakes in torch's words: torch.einsum on size-1 stand-ins."""
    for term in equation.partition("->")[0].split(","):
        letters = term.replace("...", "").replace(" ", "")
        repeated = sorted({c for c in letters if letters.count(c) > 1})
        if repeated:
            raise Diagnostic(f"torch.einsum(): subscript {repeated[0]} appears more than once in the operand "
                             f"'{term}' (a diagonal), which @jit code does not support; take torch.diagonal() first")
    stand_ins = [torch.zeros([1] * b.ndim(x), dtype=DTYPES[b.dtype(x)]) for x in items]
    try:
        return TORCH_TO_NAME[torch.einsum(equation, *stand_ins).dtype]
    except RuntimeError as e:
        raise Diagnostic(str(e).splitlines()[0]) from None


def _einsum_labels(b, equation: str, items: list) -> tuple[list, list]:
    """Each operand's labels, and the output's: letters, and ints for the dims of `...` (aligned right)."""
    lhs, arrow, rhs = equation.partition("->")
    ranks = [b.ndim(x) - len(t.replace("...", "")) for t, x in zip(lhs.split(","), items)]
    width = max([r for t, r in zip(lhs.split(","), ranks) if "..." in t], default=0)
    terms = []
    for term, rank in zip(lhs.split(","), ranks):
        before, dots, after = term.partition("...")
        terms.append([*before, *range(width - rank, width), *after] if dots else list(term))
    if arrow:
        before, dots, after = rhs.partition("...")
        output = [*before, *range(width), *after] if dots else list(rhs)
    else:
        letters = [l for t in terms for l in t if isinstance(l, str)]
        output = [*range(width), *sorted(l for l in set(letters) if letters.count(l) == 1)]
    seen = {}
    for i, (labels, x) in enumerate(zip(terms, items)):
        for label, size in zip(labels, b.shape(x)):
            old = seen.setdefault(label, size)
            if isinstance(old, int) and isinstance(size, int) and old != size and 1 not in (old, size):
                raise Diagnostic(f"einsum(): subscript {label if isinstance(label, str) else '...'} has size {size} "
                                 f"for operand {i} which does not broadcast with previously seen size {old}")
            seen[label] = size if isinstance(old, int) and old == 1 else old
    return terms, output


def _sum_out(b, x, labels: list, keep: set) -> tuple:
    """x summed over the dims whose labels nothing later needs."""
    axes = [i for i, l in enumerate(labels) if l not in keep]
    if not axes:
        return x, labels
    return op(b, "sum", x, axes, False), [l for l in labels if l in keep]


def _contract(b, x, lx: list, y, ly: list, needed: set) -> tuple:
    """x and y multiplied and summed over the labels they share that nothing later needs."""
    x, lx = _sum_out(b, x, lx, needed | set(ly))
    y, ly = _sum_out(b, y, ly, needed | set(lx))
    for label in [l for l in lx if l in ly and l not in needed]:  # a size 1 against n: the n summed first
        sx, sy = b.shape(x)[lx.index(label)], b.shape(y)[ly.index(label)]
        if same_size(sx, 1) != same_size(sy, 1):
            x, lx = _sum_out(b, x, lx, set(lx) - {label})
            y, ly = _sum_out(b, y, ly, set(ly) - {label})
    batch = [l for l in lx if l in ly and l in needed]
    summed = [l for l in lx if l in ly and l not in needed]
    left, right = [l for l in lx if l not in ly], [l for l in ly if l not in lx]
    shape_x = dict(zip(lx, b.shape(x)))
    shape_y = dict(zip(ly, b.shape(y)))
    outer = broadcast(tuple(shape_x[l] for l in batch), tuple(shape_y[l] for l in batch))
    sizes_left, sizes_right = [shape_x[l] for l in left], [shape_y[l] for l in right]
    x = permuted(b, x, [lx.index(l) for l in batch + left + summed])
    y = permuted(b, y, [ly.index(l) for l in batch + summed + right])
    if not summed:  # an outer or element-wise product: broadcasting
        x = reshaped(b, x, [*b.shape(x)] + [1] * len(right))
        y = reshaped(b, y, [*b.shape(y)[:len(batch)], *[1] * len(left), *b.shape(y)[len(batch):]])
        return op(b, "multiply", x, y), batch + left + right
    inner = math.prod(b.shape(x)[len(batch) + len(left):])  # the summed dims' sizes (x's, which y's broadcast to)
    x = reshaped(b, x, [*b.shape(x)[:len(batch)], math.prod(sizes_left), inner])
    y = reshaped(b, y, [*b.shape(y)[:len(batch)], inner, math.prod(sizes_right)])
    product = op(b, "matmul", x, y)
    return reshaped(b, product, [*outer, *sizes_left, *sizes_right]), batch + left + right
