"""FuseRowwise: one kernel per row-wise computation written from primitives (layernorm, RMSNorm, softmax,
log-softmax, logsumexp, variance), like the library ops get.

FuseOps never fuses a reduction into a later reduction, so `mean -> subtract -> square -> mean -> rsqrt`
becomes one kernel per reduction, each reading the row again; nor a producer into a `mean` (TVM's mean
ends in a divide: out-element-wise-fusable, which takes consumers only), nor a view or a gather into
any reduction. This pass runs after AnnotateTIROpPattern and groups the kernel calls of each dataflow
block that work on the same rows: reductions over the same axes of the same shape (any axes: the
trailing ones of a norm, all of a `.mean()`, a middle one; several reductions only where a rule
schedules them together, see several_reductions), element-wise ops on those row tiles or on their
per-row results, views (a transpose, a slice) and gathers of what the group does not compute, read as
tiles, reshapes between per-row results (`keepdims=False` then `expand_dims`), gathers of one value
per row (the picked logit of a cross-entropy) and element-wise producers of a smaller shape that only
the group reads (a scalar's cast, an attention bias: recomputed where read). Each group becomes a
Relax function marked "Primitive": FuseOps leaves it alone and FuseTIR merges it into one PrimFunc,
which Dlight's row rules schedule as one thread block per row. FuseTIR keeps every op's arithmetic, so
results only change by how the compiler reassociates floats; no op is computed twice (each belongs to
at most one group; a producer recomputed where read belongs to the group that reads it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..schedules.small_reduction import MAX_EXTENT
from .blocks import BlockRewriter

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
# AnnotateTIROpPattern's op kinds (mean is OUT_EWISE_FUSABLE: its divide follows the sum)
_ELEMWISE, _BROADCAST, _INJECTIVE, _COMM_REDUCE, _OUT_EWISE_FUSABLE, _OPAQUE = 0, 1, 2, 3, 4, 8
PREFIX = "fused_rows_"


# --------------------------------------------------------------------------------------------------
# what each kernel call does to rows
# --------------------------------------------------------------------------------------------------

class Rows:
    """A row space: the tile `shape` and the `axes` of it that are reduced (any of them: the trailing
    ones of a softmax, all of a `.mean()`, a middle one); the other axes index rows."""

    def __init__(self, shape: tuple, axes):
        self.shape, self.axes = shape, tuple(axes)

    @property
    def kept(self) -> tuple:  # a keepdims reduction's result
        return tuple(tirx.IntImm(str(d.ty), 1) if i in self.axes else d for i, d in enumerate(self.shape))

    @property
    def dropped(self) -> tuple:  # keepdims=False
        return tuple(d for i, d in enumerate(self.shape) if i not in self.axes)

    @property
    def trailing(self) -> bool:
        """Whether the reduced axes are the innermost ones and some axis is left to index rows."""
        n = len(self.shape)
        return 0 < len(self.axes) < n and self.axes == tuple(range(n - len(self.axes), n))

    @property
    def whole(self) -> bool:
        """Whether every axis is reduced (`x.sum()`, `x.mean()`): one result, ready only after a
        grid-wide sync (a row sum of one row, shape (1, n), is still a row)."""
        return len(self.axes) == len(self.shape)

    def per_row(self, shape) -> bool:
        return _same(shape, self.kept) or _same(shape, self.dropped)

    def __eq__(self, other):
        return isinstance(other, Rows) and self.axes == other.axes and _same(self.shape, other.shape)

    def __repr__(self):
        return f"Rows({list(self.shape)}, axes={self.axes})"


@dataclass
class _Op:
    kind: str            # "reduce", "ewise" or "injective" (a reshape back, a gather of one value per row)
    shape: tuple         # of the result
    rows: Rows | None    # the rows a reduction reduces
    operands: tuple      # its tensor operands
    pattern: int = _OPAQUE  # its op_pattern
    reshape: bool = False   # an injective op that only reshapes: a view of the same memory (views.py)
    plain: bool = True      # an injective op reading at loop indices (times a stride) or constants only
    across: tuple = ()      # output axes along which a view reads its source's contiguous axis (_reads_across)


def _shape(expr) -> tuple | None:
    ty = expr.ty
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        return tuple(ty.shape.values)
    return None


def _same(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        tvm_ffi.structural_equal(p, q) for p, q in zip(a, b))


def _is_one(dim) -> bool:
    return isinstance(dim, tirx.IntImm) and dim.value == 1


def _classify(mod: tvm.IRModule, binding) -> _Op | None:
    call = binding.value
    if isinstance(call, relax.TupleGetItem):  # one result of a kernel with several (online softmax's)
        out = _shape(binding.var)
        return None if out is None else _Op("ewise", out, None, (call.tuple_value,), _ELEMWISE)
    if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
        return None
    out = _shape(binding.var)
    several = out is None and isinstance(binding.var.ty, relax.TupleType)
    results = [out]
    if several:  # a reduction with several per-row results (online softmax's: keepdims or not, each)
        results = [_shape(relax.Var("r", f)) for f in binding.var.ty.fields]
        out = results[0] if results and all(r is not None for r in results) else None
    func = mod[call.args[0]]
    if out is None or func.attrs is None or "op_pattern" not in func.attrs:
        return None
    pattern = int(func.attrs["op_pattern"])
    if several and pattern not in (_COMM_REDUCE, _OUT_EWISE_FUSABLE):  # a split: not a row op
        return None
    tensors = [a for a in call.args[1].fields if isinstance(a.ty, relax.TensorType)]
    shapes = tuple(_shape(a) for a in tensors)
    if any(s is None for s in shapes):
        return None
    if pattern in (_ELEMWISE, _BROADCAST):
        return _Op("ewise", out, None, tuple(tensors), pattern)
    if pattern == _INJECTIVE or (pattern == _OPAQUE and _one_spatial_block(func)):  # a gather is opaque
        return _Op("injective", out, None, tuple(tensors), pattern, relax.analysis.has_reshape_pattern(func),
                   _reads_plainly(func), _reads_across(func))
    if len(tensors) != 1:  # a matmul (OUT_EWISE_FUSABLE too) reads two tensors
        return None
    (full,) = shapes
    axes = _reduced_axes(func, len(full)) if pattern in (_COMM_REDUCE, _OUT_EWISE_FUSABLE) else None
    if axes:
        rows = Rows(full, axes)
        if all(rows.per_row(r) for r in results) and not all(_is_one(full[a]) for a in axes):  # kept or dropped
            return _Op("reduce", out, rows, tuple(tensors), pattern)
    return None


def _reduced_axes(func, ndim: int) -> tuple | None:
    """The axes of its (one) input that a reduction PrimFunc reduces, read off its first reduction
    block: the positions of the reduction's iteration variables in its load of an input-shaped buffer
    (the input, or its float32 copy). None for what loads no such buffer at plain indices (a pool)."""
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    for block in blocks:
        reduced = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
        if not reduced:
            continue
        names = [iv.var for iv in block.iter_vars]
        loads = []
        tvm_ffi.structural_walk(block.body, (tvm.ir.expr.TensorLoad, loads.append))
        written = [w.source for w in block.writes]
        for load in (ld for ld in loads if not any(ld.source.same_as(w) for w in written)):  # not the accumulator
            index = list(load.indices)
            if len(index) == ndim and all(any(i.same_as(v) for v in names) for i in index) \
                    and len({str(i) for i in index}) == ndim:
                return tuple(p for p, i in enumerate(index) if any(i.same_as(v) for v in reduced))
        return None
    return None


def _reads_plainly(func) -> bool:
    """Whether every load of a PrimFunc indexes with loop variables, each maybe times a constant, or
    constants: a transpose, a broadcast, a strided slice from 0; not a slice at an offset, a gather or a
    reshape's division."""
    loads = []
    tvm_ffi.structural_walk(func.body, (tvm.ir.expr.TensorLoad, loads.append))

    def plain(index):
        if isinstance(index, tirx.Mul):
            index = index.a if isinstance(index.b, tirx.IntImm) else index.b if isinstance(index.a, tirx.IntImm) else index
        return isinstance(index, (tirx.Var, tirx.IntImm))
    return all(plain(i) for load in loads for i in load.indices)


def _reads_across(func) -> tuple:
    """The output axes along which a one-block view loads some source's contiguous axis (its last
    one of more than one element), other than the output's own contiguous axis: (1,) for a 2-d
    transpose, () for a view that keeps the contiguous axis (a slice, a broadcast)."""
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    blocks = [b for b in blocks if b.iter_vars]
    if len(blocks) != 1:
        return ()
    loops = [iv.var for iv in blocks[0].iter_vars]
    spatial = [v for iv, v in zip(blocks[0].iter_vars, loops) if not _is_one(iv.dom.extent)]
    loads = []
    tvm_ffi.structural_walk(blocks[0].body, (tvm.ir.expr.TensorLoad, loads.append))
    inner = [_inner_index(load) for load in loads]
    return tuple(sorted({p for p, v in enumerate(loops) for i in inner
                         if i is not None and i.same_as(v) and spatial and not v.same_as(spatial[-1])}))


def _inner_index(load):
    """The loop variable that indexes a load's source along its contiguous axis, or None."""
    axes = [i for i, d in enumerate(load.source.shape) if not _is_one(d)]
    if not axes:
        return None
    index = load.indices[axes[-1]]
    if isinstance(index, tirx.Mul):  # a strided slice: step times a loop
        index = index.a if isinstance(index.b, tirx.IntImm) else index.b
    return index if isinstance(index, tirx.Var) else None


def _one_spatial_block(func) -> bool:
    """Whether a PrimFunc is one loop nest writing each output element once (an indexed read, say)."""
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    blocks = [b for b in blocks if b.iter_vars]  # not the root block
    return len(blocks) == 1 and blocks[0].init is None and all(
        iv.iter_type == tirx.IterVar.DataPar for iv in blocks[0].iter_vars)


# --------------------------------------------------------------------------------------------------
# grouping the bindings of one dataflow block
# --------------------------------------------------------------------------------------------------

@dataclass(eq=False)
class _Group:
    members: list
    rows: Rows | None     # None until a reduction joins: then every member is a tile or a per-row value
    shape: tuple          # the common shape of a group without rows
    tile: bool            # whether a group without rows may join others of its shape (no lone injective op)
    singleton: _Op | None = field(default=None)  # the op of a one-member group (joins per-row values)
    recomputed: set = field(default_factory=set)  # members recomputed where read (_broadcast_producer)


def _vars(expr) -> list:
    found = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


class _Graph:
    """The dataflow between the bindings of one block."""

    def __init__(self, bindings):
        self.order = {b.var: i for i, b in enumerate(bindings)}
        self.producers = {b.var: _unique(v for v in _vars(b.value) if v in self.order) for b in bindings}
        self.consumers = {b.var: [] for b in bindings}
        for b in bindings:
            for p in self.producers[b.var]:
                self.consumers[p].append(b.var)

    def reach(self, start, edges, group=lambda v: (v,)) -> set:
        """What paths along `edges` reach from `start`; entering a member of a group (`group(v)`: the
        members of v's group) reaches all of the group."""
        seen, todo = set(), list(start)
        while todo:
            for v in edges[todo.pop()]:
                for u in group(v):
                    if u not in seen:
                        seen.add(u)
                        todo.append(u)
        return seen

    def convex(self, members, group=lambda v: (v,)) -> bool:
        """No path leaves the set and comes back (the group's call would depend on itself), through
        other bindings or through other groups (`group(v)`: the members of v's group, which is one
        call too: what reads any member waits for all of them, and all wait for what any one reads).
        Two groups each convex in the bindings' graph may still wait for each other: in the backward
        of exp(x) * exp(y) with y broadcast, {exp(x), x's gradient} feeds the sum of d_out * exp(x)
        over y's broadcast axes, which feeds {exp(y), y's gradient}, and exp(y) feeds x's gradient.
        Checked at each merge, the groups stay acyclic."""
        members = set(members)
        reached = self.reach(members, self.consumers, group) & self.reach(members, self.producers, group)
        return not reached - members


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def several_reductions(rows: Rows) -> bool:
    """Whether one kernel may hold several reductions over `rows`: over the innermost axes, where
    RowKernel (GPU) and CPUReduction schedule them together, a row per block or thread; over a few
    elements of outer or middle axes (`_few`). Over other outer axes (OuterReduction takes such a
    kernel, a launch per reduction) few kept rows (batch norm of an NCHW tensor: a row per channel)
    left it to GeneralReduction, a block per row, where a split reduction per kernel fills the GPU;
    over a whole tensor no rule takes several (Fallback: one thread). Those stay a kernel per
    reduction, each with its producers and epilogue."""
    return rows.trailing or _few(rows)


def _few(rows: Rows) -> bool:
    """Whether `rows` reduce at most SmallReduction's MAX_EXTENT elements (static) of axes other than
    the innermost: a softmax over a middle axis of 2 (p116). Each thread of SmallReduction (GPU) then
    computes every reduction it reads, in registers, and CPUOuterReduction runs them in one loop
    nest: one kernel reads the input once, where a kernel per reduction wrote `exp(x - max)` out and
    read it back (two launches, three tensor passes instead of one)."""
    if rows.whole or len(rows.shape) - 1 in rows.axes:
        return False
    count = 1
    for axis in rows.axes:
        if not isinstance(rows.shape[axis], tirx.IntImm):
            return False
        count *= rows.shape[axis].value
    return count <= MAX_EXTENT


# Whether a row kernel may write several per-row results: see several_outputs.
SEVERAL_OUTPUTS = True


def several_outputs() -> bool:
    """Whether reductions over the same rows that read a common value (max and argmax of x, the sum
    of x and of x * x, a softmax's max and argmax of its probabilities) become one kernel writing each
    result: InnerReduction and CPUReduction store any number of results (schedules/side_outputs.py),
    SmallReduction each of its columns'. Off (False), each stays a kernel of its own and reads the
    rows again (sum and sum of squares over 4096 x 4096 on one CPU thread: 4.7 ms apart, 3.2 joined)."""
    return SEVERAL_OUTPUTS


def _joinable(a: _Group, b: _Group) -> Rows | None | bool:
    """The rows of a and b joined, None for two row-less groups of one shape, False when they don't join."""
    if a.rows is not None and b.rows is not None:  # several reductions: only where a rule schedules them
        return a.rows if a.rows == b.rows and several_reductions(a.rows) else False
    if a.rows is None and b.rows is None:
        return None if a.tile and b.tile and _same(a.shape, b.shape) else False
    rows, other, group = (a.rows, b, a) if a.rows is not None else (b.rows, a, b)
    if other.tile and _same(other.shape, rows.shape):  # tiles of these rows
        return rows
    op = other.singleton  # one op giving a per-row value: lse - picked, a reshape back, a gather
    if op is not None and op.kind == "injective" and not op.reshape and _same(op.shape, rows.shape):
        # a tile read through a view (a transpose, a slice) or a gather, of what the group does not
        # compute (_reads_outside); a reshape of it costs nothing (its memory viewed anew: views.py)
        return rows
    if op is None or not rows.per_row(op.shape):
        return False
    if op.kind == "ewise":
        return rows
    # an injective op reads per-row values, or picks from what the group does not compute (its
    # index need not be the row's own, and a block only holds its own row of what the group computes)
    inside = set(group.members)
    if all(rows.per_row(_shape(v)) or v not in inside for v in op.operands):
        return rows
    return False


def _reads_outside(members: list, ops: dict, rows: Rows | None, recomputed: set = frozenset()) -> bool:
    """Whether every injective op of a would-be group (a view, a gather: its index need not be the
    row's own) reads only per-row values, what the group does not compute, or what it recomputes
    where read from its inputs (a weight's broadcast): a row kernel holds only its own row of what it
    computes."""
    inside = set(members) - set(recomputed)
    return all(ops[m].kind != "injective" or all(
        v not in inside or (rows is not None and rows.per_row(_shape(v))) for v in ops[m].operands)
        for m in members)


def partition(mod: tvm.IRModule, bindings: list, side_outputs: bool = False) -> list[list]:
    """The row groups of a block's bindings, each a list of vars in binding order whose last one is
    the group's last output. A group over the innermost axes also outputs what else it computes that
    is read outside it, per-row values or tiles (_writes_several: the row rules store them through
    copies, schedules/side_outputs.py); with `side_outputs` (a training forward), a group over any
    rows outputs the per-row values it saves for the backward. Other groups keep one output: no rule
    of theirs writes more (such a kernel would fall to CPUSpatial or Dlight's Fallback)."""
    graph = _Graph(bindings)
    ops = {b.var: _classify(mod, b) for b in bindings}
    for b in bindings:  # only the results of a row reduction are per-row values
        if isinstance(b.value, relax.TupleGetItem) and getattr(ops.get(b.value.tuple_value), "kind", None) != "reduce":
            ops[b.var] = None
    group_of: dict = {}
    for b in bindings:
        op = ops[b.var]
        if op is None:
            continue
        group_of[b.var] = _Group([b.var], op.rows, op.shape, op.kind != "injective", op)
        _join_producers(group_of[b.var], group_of, graph, ops)

    if several_outputs():
        _join_siblings(bindings, group_of, graph, ops)
    result = []
    rows_of = {v: g.rows for g in _unique(group_of.values()) for v in g.members}
    todo = [g.members for g in _unique(group_of.values())]
    while todo:
        members = todo.pop(0)
        outs = _outputs(members, graph)
        rows = rows_of.get(members[-1]) if members else None
        if _writes_several(members, outs, rows, graph, side_outputs):
            members = _transposes_apart(members, ops, rows, outs)
            if graph.convex(members):  # (else a path out and back: left to FuseOps, fuzz 41003452)
                result.append(members)
            continue
        if len(outs) > 1:
            # Dlight's row rules take one output: split off the first one and what it needs (both
            # parts stay convex: the first is closed under producers), and try each part on its own
            first = {outs[0]} | graph.reach([outs[0]], graph.producers)
            todo += [[v for v in members if v in first], [v for v in members if v not in first]]
            continue
        if not outs:
            continue
        # only what the output needs (a dead member would be a second output of the kernel)
        needed = graph.reach(outs, graph.producers) | set(outs)
        trimmed = [v for v in members if v in needed]
        if len(trimmed) < len(members) and len(_outputs(trimmed, graph)) > 1:
            todo.append(trimmed)   # a value the dropped members read is now read outside: look again
            continue
        members = _transposes_apart(_scheduled_views(trimmed, ops), ops, rows, outs)
        if len(members) > 1 and any(ops[v].kind == "reduce" for v in members) and not _fuse_ops_does_it(
                members, ops) and graph.convex(members):
            result.append(members)
    return result


def _join_producers(mine: _Group, group_of: dict, graph: _Graph, ops: dict) -> None:
    """Merge into `mine` the groups of what its members read, while one joins: after a merge, the
    producers of what joined are looked at too (a gather's index joins once the gather has)."""
    merged = True
    while merged:
        merged = False
        producers = _unique(group_of[p] for v in mine.members for p in graph.producers[v] if p in group_of)
        for g in sorted(producers, key=lambda g: g.rows is None):  # groups with rows first
            if g is mine:
                continue
            recompute = _broadcast_producer(g, mine, graph, ops)
            rows = mine.rows if recompute else _joinable(g, mine)
            recomputed = g.recomputed | mine.recomputed | (set(g.members) if recompute else set())
            if rows is False or (FEED_OTHER_ROWS and _feeds_other_rows(mine, g, graph, ops)) \
                    or not _reads_outside(g.members + mine.members, ops, rows, recomputed) \
                    or _tile_after_whole(g.members + mine.members, ops, rows, graph) or not graph.convex(
                    g.members + mine.members, lambda v: group_of[v].members if v in group_of else (v,)):
                continue
            g.members = sorted(g.members + mine.members, key=graph.order.get)
            g.rows, g.tile, g.singleton, g.recomputed = rows, g.tile and mine.tile, None, recomputed
            for v in mine.members:
                group_of[v] = g
            mine, merged = g, True
            break  # the producers again, of what `mine` is now


# Whether element-wise work read only by a reduction that cannot join its producer's kernel joins that
# reduction's instead (_feeds_other_rows)
FEED_OTHER_ROWS = True


def _feeds_other_rows(mine: _Group, g: _Group, graph: _Graph, ops: dict) -> bool:
    """Whether `mine`, element-wise work on g's rows without a reduction, is read only by reductions
    over those rows that cannot join g (several reductions over outer axes: a kernel each). It is
    then the producer of their kernel (`(d * d).mean((0, 2))` after `d = h - h.mean((0, 2))`), not
    a second output of g's, which a kernel of its own would write out for them to read back."""
    if mine.rows is not None or g.rows is None or several_reductions(g.rows):
        return False
    readers = [c for v in mine.members for c in graph.consumers[v] if c not in mine.members]
    return bool(readers) and all(ops.get(c) is not None and ops[c].kind == "reduce" and ops[c].rows == g.rows
                                 for c in readers)


# Whether element-wise producers of a smaller shape are recomputed in the row kernel that reads them
# (_broadcast_producer); False keeps each a kernel of its own, as before.
RECOMPUTE_PRODUCERS = True


def _broadcast_producer(g: _Group, mine: _Group, graph: _Graph, ops: dict) -> bool:
    """Whether `g` is element-wise work on a smaller shape than the rows of `mine`, read by it only
    through element-wise ops (a scalar argument's cast, attention's (heads, 1, 1) slopes and (T, T)
    bias or mask): its kernel recomputes each element where it reads it, as Inductor inlines a
    pointwise producer into a reduction, instead of a kernel of its own writing it out (one thread for
    a scalar). A gather reading it keeps it apart (_reads_outside)."""
    if not RECOMPUTE_PRODUCERS or mine.rows is None or g.rows is not None or g.shape is None \
            or not _smaller(g.shape, mine.rows.shape) \
            or any(ops[v].kind != "ewise" and not _plain_view(ops[v]) for v in g.members):
        return False
    return all(c in mine.members or c in g.members for v in g.members for c in graph.consumers[v])


def _smaller(shape, rows_shape) -> bool:
    """Whether a tensor of `shape`, not the rows' tile itself, broadcasts to it (each axis, aligned from
    the right, of the tile's size or 1: attention's (heads, T, T) bias of (1, heads, T, T) rows), or
    has fewer elements than it (static sizes: a weight's view in the rows' shape): recomputed where
    read, it costs no more than a load. A split's wider source, recomputed for each half, would be
    computed twice; a transposed tile is read across its rows (Tiled's)."""
    pad = (len(rows_shape) - len(shape)) * [tirx.IntImm("int64", 1)] + list(shape)
    if len(pad) == len(rows_shape) and not _same(shape, rows_shape) and all(
            _is_one(a) or _same((a,), (b,)) for a, b in zip(pad, rows_shape)):
        return True
    sizes = [_static(d) for d in shape] + [_static(d) for d in rows_shape]
    if any(n is None for n in sizes):
        return False
    count, total = 1, 1
    for n in sizes[:len(shape)]:
        count *= n
    for n in sizes[len(shape):]:
        total *= n
    return count < total


def _static(dim):
    return int(dim) if isinstance(dim, (int, tirx.IntImm)) else None


def _plain_view(op: _Op) -> bool:
    """A view (a broadcast, an `expand_dims`, a reshape: a weight viewed in the rows' shape, see
    views.py), recomputed where read as an index into its source (views.InlineViews), like an
    element-wise producer; a gather or a transposed read is not one."""
    return op.kind == "injective" and (op.plain or op.reshape) and not op.across


def _tile_after_whole(members: list, ops: dict, rows: Rows | None, graph: _Graph) -> bool:
    """Whether a would-be group reduces the whole tile and then computes a tile from the result
    (`x * x.sum()`): every element waits for all blocks of the reduction, so that tile is another
    kernel (the reduction's strategies split it over blocks and fold the parts in one)."""
    if rows is None or not rows.whole:
        return False
    inside = set(members)
    return any(_same(ops[v].shape, rows.shape) and any(p in inside and not _same(ops[p].shape, rows.shape)
                                                       for p in graph.producers[v]) for v in members)


def _scheduled_views(members: list, ops: dict) -> list:
    """The group without the views that would leave its kernel to Dlight's Fallback: where one
    reduction ends the group, no rule of ours takes the kernel and Dlight's Reduction declines a read
    at an offset or through a gather (it normalises the read into a sum of loop variables); such a
    view stays a kernel of its own. With an epilogue or several reductions, RowKernel and
    GeneralReduction take any read. (A reduction rule that reads through any index lifts this.)"""
    reductions = [v for v in members if ops[v].kind == "reduce"]
    if len(reductions) != 1 or reductions[0] is not members[-1]:
        return members
    return [v for v in members if ops[v].kind != "injective" or ops[v].plain]


def _transposes_apart(members: list, ops: dict, rows: Rows | None, outs: list) -> list:
    """The group without its transposes (views that read their source's contiguous axis along
    another axis than the tile's contiguous one, _reads_across) where the kernel also reads or writes
    a tile row-major: its reads and writes disagree on the contiguous axis, so any schedule of it
    strides through one of them (a warp touching 32 lines a load). Apart, each transpose is a kernel of
    its own (Tiled: coalesced on both sides through shared memory) and the row kernel is row-major:
    one more pass over that tensor. Tiles read only through one transpose (`x.t().sum(-1)`) stay
    fused: the reduction rules see one layout (an outer or inner reduction of the source); so do rows
    a thread reads whole (_thread_rows) where the transposes read along the innermost kept axis."""
    inside = set(members)
    views = [v for v in members if ops[v].kind == "injective" and not any(u in inside for u in ops[v].operands)]
    across = [v for v in views if ops[v].across]
    if rows is None or not across:
        return members
    tile = lambda v: _same(_shape(v), rows.shape)  # noqa: E731
    row_major = any(tile(o) for o in outs) or any(
        tile(v) and getattr(ops.get(v), "kind", None) != "injective"  # a parameter, or a computed tile
        for m in members for v in ops[m].operands if v not in inside) or any(
        tile(v) and not ops[v].across for v in views)
    if not row_major and len({ops[v].across for v in across}) == 1:
        return members
    if _thread_rows(rows) and all(ops[v].across == (len(rows.shape) - len(rows.axes) - 1,) for v in across):
        return members
    return [v for v in members if v not in across]


THREAD_ROW = 8  # rows of at most this many elements are a thread's each (SmallReduction's max_extent)


def _thread_rows(rows: Rows) -> bool:
    """Whether rows reduced along their innermost axes are at most THREAD_ROW elements each: a thread
    reads a row, threads follow the innermost kept axis, so a view that reads its source's contiguous
    axis along that kept axis is read coalesced in place (`x.permute(0, 2, 1)` of a [n, 4, m] tensor,
    normalised over the 4) and a row-major tile in short vectors: both layouts at once, no transpose."""
    if not rows.trailing or len(rows.axes) == len(rows.shape):
        return False
    width = 1
    for axis in rows.axes:
        if not isinstance(rows.shape[axis], tirx.IntImm):
            return False
        width *= int(rows.shape[axis])
    return width <= THREAD_ROW


def _writes_several(members: list, outs: list, rows: Rows | None, graph: _Graph, side_outputs: bool) -> bool:
    """Whether a group with several results stays one kernel, writing each value it computes that is
    also read outside (Inductor stores such a buffer from the kernel that computes it): over the
    innermost axes (InnerReduction and CPUReduction store any number of results, schedules/
    side_outputs.py), a per-row value (a quantisation's scale) or a tile (a residual sum that the norm
    reads) besides a last result over the rows, or per-row values that the last one depends on; in a
    training forward (`side_outputs`) over any rows, per-row values saved for the backward besides a
    tile; or reductions over the same rows each giving a result (several_outputs). Every result is
    read after the last member, where the group's call is placed."""
    if len(outs) < 2 or rows is None or outs[-1] is not members[-1] \
            or not all(_side_output(v, rows, members, graph, rows.trailing) for v in outs[:-1]):
        return False
    if rows.trailing and (_same(_shape(outs[-1]), rows.shape) or _chained(members, outs, graph)):
        return True
    if side_outputs and _same(_shape(outs[-1]), rows.shape):
        return True
    return several_outputs() and rows.per_row(_shape(outs[-1]))


def _chained(members: list, outs: list, graph: _Graph) -> bool:
    """Whether the last result depends on every other result (`m = x.max(-1)` and `m + log(sum(exp(x -
    m)))`): a chain of per-row values that one row loop computes in order, not reductions side by side
    (max and argmax), which only several_outputs lets share a kernel."""
    needed = graph.reach([outs[-1]], graph.producers)
    return all(v in needed for v in outs[:-1])


def _join_siblings(bindings: list, group_of: dict, graph: _Graph, ops: dict) -> None:
    """Merge the groups of reductions over the same rows that read a common value and not each
    other (max and argmax of x): one kernel reads the rows once for all of them."""
    readers: dict = {}
    for b in bindings:
        group = group_of.get(b.var)
        if group is not None and group.rows is not None:
            for v in ops[b.var].operands:
                readers.setdefault(v, []).append(b.var)
    for users in readers.values():
        for other in users[1:]:
            first, group = group_of[users[0]], group_of[other]
            if group is first or _joinable(first, group) is False \
                    or any(p in first.members for c in group.members for p in graph.producers[c]) \
                    or any(p in group.members for c in first.members for p in graph.producers[c]) \
                    or not graph.convex(first.members + group.members,
                                        lambda v: group_of[v].members if v in group_of else (v,)):
                continue
            first.members = sorted(first.members + group.members, key=graph.order.get)
            first.singleton = None
            for v in group.members:
                group_of[v] = first


def _side_output(v, rows: Rows, members: list, graph: _Graph, tiles: bool = False) -> bool:
    """A value the group may output besides its last member: per-row, or (`tiles`) a tile of the rows,
    whose readers outside the group come after that member (where the group's call is placed)."""
    last = graph.order[members[-1]]
    inside = set(members)
    shape = _shape(v)
    return (rows.per_row(shape) or tiles and _same(shape, rows.shape)) and \
        all(graph.order[c] > last for c in graph.consumers[v] if c not in inside)


def _fuse_ops_does_it(members: list, ops: dict) -> bool:
    """Whether FuseOps alone makes this group one kernel, so it is left to FuseOps: one reduction that
    ends it and takes in element-wise producers (sum, max), or one that starts it and takes in
    element-wise consumers (mean, whose divide makes it OUT_EWISE_FUSABLE)."""
    reductions = [i for i, v in enumerate(members) if ops[v].kind == "reduce"]
    if len(reductions) != 1 or any(ops[v].kind == "injective" or isinstance(v.ty, relax.TupleType) for v in members):
        return False
    (i,) = reductions
    pattern = ops[members[i]].pattern
    return (pattern == _COMM_REDUCE and i == len(members) - 1) or (pattern == _OUT_EWISE_FUSABLE and i == 0)


def _outputs(members: list, graph: _Graph) -> list:
    inside = set(members)
    return [v for v in members
            if not isinstance(v, relax.DataflowVar) or any(c not in inside for c in graph.consumers[v])]


# --------------------------------------------------------------------------------------------------
# rewriting: one Primitive function per group
# --------------------------------------------------------------------------------------------------

def _group_function(bindings_of: dict, members: list, outs: list):
    """The group as a Relax function and the arguments its call takes (a tuple of `outs` when it has
    several: per-row values, then the last member)."""
    inside = set(members)
    params, args, remap, body = [], [], {}, []
    for v in members:
        call = bindings_of[v].value
        if isinstance(call, relax.TupleGetItem):
            whole = call.tuple_value
            if whole not in inside and whole not in remap:  # the reduction is in another group
                args.append(whole)
                remap[whole] = relax.Var(whole.name, whole.ty)
                params.append(remap[whole])
            remap[v] = (relax.Var if v in outs else relax.DataflowVar)(v.name, v.ty)
            body.append(relax.VarBinding(remap[v], relax.TupleGetItem(remap[call.tuple_value], call.index)))
            continue
        for a in call.args[1].fields:
            if a in inside or any(a.same_as(x) for x in args):
                continue
            args.append(a)
            remap[a] = relax.Var(a.name if isinstance(a, relax.Var) else f"c{len(args)}", a.ty)
            params.append(remap[a])
        operands = relax.Tuple([remap[a] for a in call.args[1].fields])
        new = relax.Call(call.op, [call.args[0], operands, *call.args[2:]], call.attrs, call.ty_args, call.span)
        remap[v] = (relax.Var if v in outs else relax.DataflowVar)(v.name, v.ty)
        body.append(relax.VarBinding(remap[v], new))
    out = remap[members[-1]] if len(outs) == 1 else relax.Tuple([remap[v] for v in outs])
    ty = out.ty if len(outs) == 1 else relax.TupleType([remap[v].ty for v in outs])
    func = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(body)], out), ty, True)
    func, args = with_free_sizes(func, args)
    return func.with_attr("Primitive", 1), args


def with_free_sizes(func: relax.Function, args: list) -> tuple:
    """A group's function and its call's arguments, plus a Shape parameter holding the symbolic sizes
    no tensor parameter defines (`ones_like(x).sum()` names x's sizes only in its call's tir_vars; a
    (2 * n, 1) tensor defines no n): FuseTIR makes them scalar parameters of the kernel."""
    sizes = list(relax.analysis.free_symbolic_vars(func))
    if not sizes:
        return func, args
    # a size its call passes as a scalar (LegalizeOps' kernel of a (2 * n, 1) tensor takes n) is that size
    passed = {p: a for p, a in zip(func.params, args) if any(a.same_as(s) for s in sizes)}
    if passed:
        args = [a for p, a in zip(func.params, args) if p not in passed]
        func = func.bind_params(passed)
    params = [*func.params, relax.Var("sizes", relax.ShapeType(sizes))]
    return relax.Function(params, func.body, func.ret_ty, True, func.attrs, func.span), [*args, relax.ShapeExpr(sizes)]


class _Rewriter(BlockRewriter):
    side_outputs = False

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        groups = partition(self.mod, bindings, self.side_outputs) if isinstance(block, relax.DataflowBlock) else []
        if not groups and all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        bindings_of = {b.var: b for b in bindings}
        replaced, grouped = {}, set()
        graph = _Graph(bindings) if groups else None
        for members in groups:
            outs = _outputs(members, graph)
            func, args = _group_function(bindings_of, members, outs)
            names = [bindings_of[v].value.args[0].name_hint for v in members
                     if isinstance(bindings_of[v].value, relax.Call)]
            gvar = self.builder.add_func(func, PREFIX + "_".join(names))
            call = relax.Call(gvar, args)
            out = members[-1]  # every member precedes it, so its place has all the arguments
            if len(outs) == 1:
                replaced[out] = [relax.VarBinding(out, call)]
            else:   # its per-row results too: read after it (partition checked their readers come later)
                whole = relax.DataflowVar(f"{out.name}_rows", func.ret_ty)
                replaced[out] = [relax.VarBinding(whole, call)] + [
                    relax.VarBinding(v, relax.TupleGetItem(whole, i)) for i, v in enumerate(outs)]
            grouped.update(members)
        new = [n for b in bindings if b.var in replaced or b.var not in grouped
               for n in replaced.get(b.var, [b])]
        return type(block)(_transposes_once(self.mod, new, grouped, graph) if groups else new, block.span)


def _transposes_once(mod: tvm.IRModule, bindings: list, grouped: set, graph: _Graph) -> list:
    """The transposes left out of row groups (_transposes_apart) computed once: views.py gives each
    reader its own copy of a view (free where it fuses into the reader), but apart each copy would be
    a kernel writing the same tensor; a copy read only by row groups becomes a name for the first."""
    first, out = {}, []
    for b in bindings:
        readers = graph.consumers.get(b.var)
        op = _classify(mod, b) if readers and all(r in grouped for r in readers) else None
        if op is None or op.kind != "injective" or not op.across:
            out.append(b)
            continue
        key = (b.value.args[0], tuple(b.value.args[1].fields), tvm_ffi.structural_hash(b.value.ty))
        out.append(relax.VarBinding(b.var, first[key], b.span) if key in first else b)
        first.setdefault(key, b.var)
    return out


def _value(value, numbers: dict):
    """A value number: equal for the same kernel applied to values of equal numbers (a var's number is
    that of its value, an input's is itself), None for what is not numbered."""
    if isinstance(value, relax.Var):
        return numbers.get(value, ("input", value))
    if isinstance(value, relax.TupleGetItem):
        inner = _value(value.tuple_value, numbers)
        return None if inner is None else ("item", inner, value.index)
    if isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR) and isinstance(value.args[1], relax.Tuple):
        operands = tuple(_value(a, numbers) for a in value.args[1].fields)
        if None in operands:
            return None
        return ("call", value.args[0], operands, tvm_ffi.structural_hash(relax.Tuple(list(value.args[2:]))),
                tvm_ffi.structural_hash(value.ty))
    if isinstance(value, relax.Expr) and not relax.analysis.free_vars(value):  # a constant
        return ("constant", tvm_ffi.structural_hash(value))
    return None


class _Once(BlockRewriter):
    """Each reduction (or library row op) of a dataflow block that repeats an earlier one on equal
    values becomes a name for the earlier result (an element-wise op repeated stays: each copy is
    computed inside the kernel that reads it, which costs less than a kernel of its own)."""

    def __init__(self, mod):
        super().__init__(mod)
        self.merged = False

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        if isinstance(block, relax.DataflowBlock):
            numbers, first = {}, {}
            for i, b in enumerate(bindings):
                number = _value(b.value, numbers)
                numbers[b.var] = number if number is not None else ("input", b.var)
                if number is None or not isinstance(b.var, relax.DataflowVar) or not self._reduces(b.value):
                    continue
                if number in first:
                    bindings[i] = relax.VarBinding(b.var, first[number], b.span)
                    self.merged = True
                else:
                    first[number] = b.var
        if all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        return type(block)(bindings, block.span)

    def _reduces(self, call) -> bool:
        if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR)):
            return False
        func = self.mod[call.args[0]]
        return func.attrs is not None and int(func.attrs.get("op_pattern", _OPAQUE)) in (_COMM_REDUCE, _OUT_EWISE_FUSABLE)


def reductions_once(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with each reduction computed twice on equal values computed once (a loss whose rule counts
    its mask twice); see _Once."""
    rewriter = _Once(mod)
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function) and not (func.attrs is not None and "Primitive" in func.attrs):
            new = rewriter.function(func)
            if not new.same_as(func):
                rewriter.builder.update_func(gvar, new)
    if not rewriter.merged:
        return mod
    try:
        return relax.transform.CanonicalizeBindings()(rewriter.builder.get())
    except tvm.error.InternalError:
        # TVM's CanonicalizeBindings fails on some functions with branches ("TypeFunctor cannot visit
        # Type::Missing()": a reduction of uint8 values repeated inside an `if`); the reductions then
        # stay as written, which costs a kernel, not a result
        return mod


ReductionsOnce = tvm.transform.module_pass(lambda mod, _ctx: reductions_once(mod), opt_level=0, name="ReductionsOnce")


def whole_reductions_apart(mod: tvm.IRModule) -> tvm.IRModule:
    """Each reduction over every axis of its input that ends in an element-wise block (`x.mean()`)
    marked a plain reduction: FuseOps then gives it its producers but not a consumer over the whole
    tile (`x - x.mean()`), which waits for every block of the reduction (see _tile_after_whole: the
    GPU's split reduction ran such an epilogue in its one folding block, a serial loop)."""
    whole = []
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and func.attrs is not None \
                and int(func.attrs.get("op_pattern", _OPAQUE)) == _OUT_EWISE_FUSABLE:
            tensors = [p for p in func.params if tirx.is_buffer_var(p)]
            ndim = len(tensors[0].ty.shape) if len(tensors) == 2 else 0
            if ndim and _reduced_axes(func, ndim) == tuple(range(ndim)):
                whole.append(gvar)
    if not whole:
        return mod
    mod = mod.clone()
    for gvar in whole:
        mod[gvar] = mod[gvar].with_attr("op_pattern", _COMM_REDUCE)
    return mod


WholeReductionsApart = tvm.transform.module_pass(lambda mod, _ctx: whole_reductions_apart(mod), opt_level=0,
                                                 name="WholeReductionsApart")


def fuse_rowwise(mod: tvm.IRModule, side_outputs: bool = False) -> tvm.IRModule:
    """Group each row-wise computation into one Primitive function (see the module docstring)."""
    rewriter = _Rewriter(mod)
    rewriter.side_outputs = side_outputs
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function) and not (func.attrs is not None and "Primitive" in func.attrs):
            new = rewriter.function(func)
            if not new.same_as(func):
                rewriter.builder.update_func(gvar, new)
    return rewriter.builder.get()


FuseRowwise = tvm.transform.module_pass(lambda mod, _ctx: fuse_rowwise(mod), opt_level=0, name="FuseRowwise")
FuseRowwiseSideOutputs = tvm.transform.module_pass(lambda mod, _ctx: fuse_rowwise(mod, side_outputs=True), opt_level=0,
                                                   name="FuseRowwise")
