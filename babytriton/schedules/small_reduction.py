"""GPU rule SmallReduction: reductions over a few elements of outer or middle axes (a softmax over an
axis of 2, the mean of 3 channels), computed in registers by the thread that needs them: a thread a
column (every output along the short axes, a vector of the contiguous axis wide), else a thread an
element."""
from __future__ import annotations

import tvm
from tvm import s_tir
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import (contiguous_reduction, fuse, in_registers, is_buffer, is_int, normalized, reduce_count,
                       static_product, uses)
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import lanes_along, unvectorisable
from .staging import staged

MAX_EXTENT = 8  # elements a thread reduces alone; FuseRowwise joins several such reductions in a kernel


class SmallReduction(GPUScheduleRule):
    """Every reduction of the kernel sums at most `max_extent` elements (static) along axes other than
    its inputs' contiguous one: `x.amax(1)` of a (97271, 2, 100) x, then `exp(x - m)`. OuterReduction
    gave such a kernel a block of threads across the kept columns and along the two reduced rows, in two
    launches, 74 + 27 us on an H200 where torch.compile's one pointwise kernel took 40.

    Here each thread owns a column: one point of the kept axes (those along which the results of the
    reductions vary), `lanes` consecutive ones of the contiguous axis where it is kept (16 bytes of
    the widest buffer, at most 4: wider float32 math has no CUDA vector type). It computes the
    reductions of its column in registers (compute_at), then every output of the column, looping
    over the short axes: each input element is loaded once, in whole vectors, each reduction computed
    once, no cross-thread step, no second launch. Threads run across the kept axes, so a warp's
    loads of one short row are consecutive. Where the last block reads a reduction along more than
    `max_extent` outputs (a broadcast over a long axis), a thread computes one element, its few
    reduction loads hitting the cache its neighbours filled. A kernel without blocks after its
    reductions runs a thread a result (a column of them)."""

    def __init__(self, max_extent: int = MAX_EXTENT, threads: int = 256, vector_bytes: int = 16,
                 max_lanes: int = 4):
        self.max_extent, self.threads = max_extent, threads
        self.vector_bytes, self.max_lanes = vector_bytes, max_lanes

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        if not reductions or any(not self._small(sch, red) for red in reductions):
            return None
        last = blocks[-1]
        loops = sch.get_loops(last)
        spatial = loops[:len(loops) - reduce_count(sch, last)]
        if not spatial:
            return None
        short = self._short_axes(sch, last, spatial, blocks[:-1])
        if short is None:  # a thread an element
            lane = self._bind(sch, spatial)
            for block in reversed(blocks[:-1]):
                sch.compute_at(block, lane, preserve_unit_loops=True)
                in_registers(sch, block)   # the thread's own value
            return sch
        lanes = self._lanes(sch, last, spatial, short)
        self._columns(sch, blocks, spatial, short, lanes)
        return sch

    def _bind(self, sch, loops):
        """The loops fused, over blocks of `threads` threads; returns the threadIdx.x loop."""
        grid, lane = sch.split(fuse(sch, loops), [None, self.threads])
        sch.bind(grid, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        return lane

    def _small(self, sch, red) -> bool:
        """Whether `red` reduces at most `max_extent` elements (static), not along its input's
        contiguous axis (rows of a few elements are InnerReduction's: a thread would stride)."""
        loops = sch.get_loops(red)
        extent = static_product(sch, loops[len(loops) - reduce_count(sch, red):])
        return extent is not None and extent <= self.max_extent and not contiguous_reduction(sch, red)

    def _short_axes(self, sch, last, spatial, earlier) -> list[int] | None:
        """The positions of the last block's spatial loops along which some value it reads from an
        earlier block (a reduction's result) stays the same: a thread loops over them, computing
        that value once. None where they span more than `max_extent` outputs or a symbolic number."""
        stmt = sch.get(last)
        ivs = [iv.var for iv in stmt.iter_vars][:len(spatial)]
        written = [w.source for b in earlier for w in sch.get(b).writes]
        short = set()
        for region in stmt.reads:
            if any(region.source.same_as(w) for w in written):
                short |= {i for i, iv in enumerate(ivs) if not any(uses(r.min, iv) for r in region.region)}
        short = sorted(i for i in short if not is_int(get_extent(sch, spatial[i]), 1))
        extent = static_product(sch, [spatial[i] for i in short])
        if extent is None or extent > self.max_extent or len(short) == len(spatial):
            return None
        return short

    def _lanes(self, sch, last, spatial, short) -> int:
        """Consecutive elements of the innermost axis a thread takes, where that axis is kept: a
        vector of `vector_bytes` of the widest buffer the kernel touches (at most `max_lanes`)
        dividing the axis, and one whole vector of every buffer the last block reads and writes."""
        if len(spatial) - 1 in short:
            return 1
        extent = get_extent(sch, spatial[-1])
        if not isinstance(extent, int):
            return 1
        buffers = [p for p in sch.mod["main"].params if is_buffer(p)]
        widest = max(tvm.DataType(b.ty.dtype).bits // 8 for b in buffers)
        lanes = min(self.max_lanes, max(1, self.vector_bytes // widest))
        stmt = sch.get(last)
        return lanes_along(stmt, stmt.iter_vars[len(spatial) - 1].var, extent, lanes)

    def _columns(self, sch, blocks, spatial, short, lanes) -> None:
        """A thread a column: the kept loops (the innermost cut into vectors of `lanes`) over the
        threads, the short ones and the vector inside each thread; the earlier blocks computed at
        the thread, each with its vector innermost."""
        last = blocks[-1]
        kept = [loop for i, loop in enumerate(spatial) if i not in short]
        inner = [spatial[i] for i in short]
        vector = []
        if lanes > 1:
            column, vec = sch.split(kept[-1], [None, lanes])
            kept, vector = [*kept[:-1], column], [vec]
        reduced = sch.get_loops(last)[len(spatial) + (1 if lanes > 1 else 0):]
        sch.reorder(*kept, *inner, *reduced, *vector)
        lane = self._bind(sch, kept)
        for block in reversed(blocks[:-1]):
            sch.compute_at(block, lane, preserve_unit_loops=True)
            in_registers(sch, block)   # the thread's own values
        for block in blocks:
            self._vectorize(sch, block, lane, lanes)
        extent = get_extent(sch, spatial[-1]) if short and short[-1] == len(spatial) - 1 else None
        if isinstance(extent, int) and extent & (extent - 1) == 0:
            # the short axis innermost in the output (p185: a norm over the last axis of 4 of a
            # permuted input): a thread's outputs are consecutive, and so is what it reads along
            # that axis of the inputs laid out like the output; each moves as one vector
            var = sch.get(last).iter_vars[len(spatial) - 1].var
            staged(sch, last, lane, var, extent, readers=blocks)

    def _vectorize(self, sch, block, lane, lanes) -> None:
        """The block's loop over the thread's vector moved innermost and vectorised where each of its
        accesses is a whole vector (and it stores one value: TVM's vectoriser runs an argmax's
        (index, value) Lets lane by lane, then stores the last lane's pair in every lane); the loops
        in the thread otherwise unrolled."""
        loops = sch.get_loops(block)
        depth = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(lane))) + 1
        mine = loops[depth:]
        stmt = sch.get(block)
        var = _column_var(stmt)
        vec = None
        if lanes > 1 and var is not None:
            realize = sch.get(mine[-1]).body if mine else None
            binding = dict(zip([iv.var for iv in stmt.iter_vars], realize.iter_values)) if realize is not None else {}
            vec = next((loop for loop in mine if get_extent(sch, loop) == lanes and var in binding
                        and uses(binding[var], sch.get(loop).loop_var)), None)
        if vec is not None:
            others = [loop for loop in mine if not sch.get(loop).same_as(sch.get(vec))]
            sch.reorder(*others, vec)
            if not (len(stmt.writes) == 1 and lanes_along(stmt, var, lanes, lanes) == lanes and not unvectorisable(
                    stmt, lanes) and _vectorized(sch, block, vec, others[0] if others else vec)):
                staged(sch, block, lane, var, lanes)
                sch.unroll(vec)
        for loop in sch.get_loops(block)[depth:]:
            extent = get_extent(sch, loop)
            if isinstance(extent, int) and extent > 1 and (vec is None or not sch.get(loop).same_as(sch.get(vec))):
                sch.unroll(loop)


def _column_var(stmt):
    """The block's iteration variable that indexes the last axis of what it writes (the contiguous
    kept axis), or None."""
    last = stmt.writes[0].region[-1].min
    return next((iv.var for iv in stmt.iter_vars if last.same_as(iv.var)), None)


def _vectorized(sch, block, vec, outer) -> bool:
    """Whether `vec` could be vectorised; a reduction's init is first taken out of the loops from
    `outer` (TVM vectorises no loop around it), where its bindings allow."""
    for decompose in (False, True):
        try:
            if decompose:
                sch.vectorize(sch.get_loops(sch.decompose_reduction(block, outer))[-1])
            sch.vectorize(vec)
            return True
        except s_tir.ScheduleError:  # a binding TVM sees as not affine (a thread's column of a ragged split)
            if not reduce_count(sch, block):
                return False
    return False

