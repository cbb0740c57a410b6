"""GPU rule OuterReduction: reductions over outer or middle axes (`x.sum(0)`, `x.amax(1)` of a
(B, S, H) `x`, batch-norm statistics), threads across the kept contiguous axis so that a warp reads
whole rows, the reduced axes looped per thread, split over blocks in two stages when the kept
columns are too few to fill the GPU."""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import fuse, normalized, reduce_count, static_product, uses
from .columns import columns
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import contiguous_lanes
from .reasons import decline

SYMBOLIC = 4096  # what a symbolic extent counts for when sizing the grid


@dataclass
class Plan:
    """How one column reduction runs: `vector` contiguous columns per thread, `tx` threads across the
    columns and `ty` along the reduction in a block, `parts` blocks along the reduction (then a
    second stage folds their partial results)."""
    vector: int
    tx: int
    ty: int
    parts: int
    across: bool  # the `ty` threads' results reduced across them, else each a partial result of its own


class OuterReduction(GPUScheduleRule):
    """A reduction whose inputs keep their innermost axis (column sums, a max over a middle axis, the
    per-channel statistics of batch norm), with element-wise blocks before and after it. Dlight's
    Reduction gives a block 16 columns and 16 threads along the reduction; its Fallback (a NaN-aware
    max) one thread per column, each walking a strided column alone. Here:

    * a block is `tx` threads across `tx * vector` contiguous columns, each thread loading `vector`
      of them at once (16 bytes) where whole vectors tile the row, and `ty` threads along the
      reduced axes, each summing every `ty`-th row into registers; the `ty` partial results are
      then reduced across the block's threads. A row that no tile divides (a prime or symbolic
      width) is predicated, and its `ty` threads keep partial results of their own instead;
    * fewer threads across (down to rows of 32 elements, still whole cache lines) leave more along
      the rows; when the grid still has fewer than `min_threads` threads, the rows are also cut
      into `parts` strided shares, one block each, whose partial results a second stage folds (a
      column reduction itself, over the parts);
    * a block after the reduction over the reduced shape (a mean's division) runs where the last
      stage leaves each result, in a register; one over a larger shape (`x - x.mean(0)`) is a
      kernel of its own, 16 bytes per thread.
    Each reduction is a kernel of its own: a second reduction that reads the first one's result
    (a variance after its mean) must wait for every block of the first. On an H200 (benchmarks/probes/outer.py):
    a (32, 2048, 1024) max over the middle axis took 68 us where Fallback took 190 and torch.compile
    76; a (2^20, 4) column sum 20 us, Dlight's Reduction (one block) 656."""

    def __init__(self, threads: int = 256, min_steps: int = 16, min_threads: int = 1 << 16,
                 max_parts: int = 128, vector_bytes: int = 16, max_lanes: int = 4, spread_threads: int = 256):
        self.threads, self.min_steps, self.min_threads = threads, min_steps, min_threads
        self.max_parts, self.vector_bytes, self.max_lanes = max_parts, vector_bytes, max_lanes
        self.spread_threads = spread_threads

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        layouts = [columns(sch, b) for b in reductions]
        if not reductions or any(layout is None for layout in layouts):
            return None
        if any(len(sch.get(b).writes) != 1 for b in reductions):
            return decline("two results per reduction (an argmax's index and value)")
        home, kept = None, None
        for block in blocks:
            loops = sch.get_loops(block)
            if reduce_count(sch, block):
                kept = _wide_extents(sch, loops[:len(loops) - reduce_count(sch, block)])
                # its results stay in registers where every block reading them runs in its fold
                local = not _writes_param(sch, block) and all(
                    not reduce_count(sch, c) and _wide_extents(sch, sch.get_loops(c)) == kept
                    for c in sch.get_consumers(block))
                if local:
                    sch.set_scope(block, 0, "local")
                home = self._reduce(sch, block, layouts[reductions.index(block)])
                home = home if local else None
            elif home is not None and _wide_extents(sch, loops) == kept:
                sch.reverse_compute_at(block, home, preserve_unit_loops=True)
            else:
                self._spread(sch, block)
        return sch

    # -- one reduction ----------------------------------------------------------------------------
    def _reduce(self, sch, block, layout):
        """Schedule one column reduction; returns the loop, one iteration per result, where an
        element-wise block over the reduced shape can follow it (a mean's division)."""
        loops = sch.get_loops(block)
        n_kept = layout.n_outer + layout.n_inner
        dims = [get_extent(sch, loop) for loop in loops[:n_kept]]
        outer = fuse(sch, loops[:layout.n_outer]) if layout.n_outer else None
        column = fuse(sch, loops[layout.n_outer:n_kept])
        reduced = fuse(sch, loops[n_kept:])
        return self._stage(sch, block, outer, column, reduced, [d for d in dims if d != 1], layout.n_outer)

    def _stage(self, sch, block, outer, column, reduced, dims, n_outer, split=True):
        """One stage: blocks of threads over tiles of the columns; where the plan cuts the reduction
        into parts, their partial results (rfactor) are then folded by a stage of their own, a
        column reduction over the parts. `dims`: the kept extents, the first `n_outer` of them fused
        into `outer`. Returns the last stage's threadIdx.x loop."""
        plan = self._plan(sch, block, outer, column, reduced, dims[n_outer:] or [1], split)
        # each thread's share of the rows: i * parts * ty + part * ty + y
        shares = plan.parts if plan.across else plan.parts * plan.ty
        sch.split(reduced, [None, shares, plan.ty] if plan.across else [None, shares])
        work = block
        if shares > 1:
            work = sch.rfactor(sch.get_loops(block)[-2 if plan.across else -1], factor_axis=0)
        partial = work
        if plan.across and plan.ty > 1:  # each thread's partial result, in registers
            partial = sch.rfactor(sch.get_loops(work)[-1], factor_axis=0)
            sch.set_scope(partial, 0, "local")
        bx, lane_x = self._in_thread(sch, partial, plan, outer is not None)
        if plan.across and plan.ty > 1:
            lane_x = self._across_threads(sch, work, bx, plan)
        if shares == 1:
            return lane_x
        *kept, parts = sch.get_loops(block)  # the fold: [kept..., parts], contiguous along the kept
        return self._stage(sch, block, None, fuse(sch, kept), parts, dims, 0, split=False)

    def _in_thread(self, sch, partial, plan, has_outer):
        """Each thread's loop over its rows, [blocks, threadIdx.y, threadIdx.x, rows, vector], with
        its partial result in registers, the vector's columns loaded at once (`columns`: every read
        along the columns has them last, contiguous); returns the block and the threadIdx.x loops."""
        loops = sch.get_loops(partial)
        outer, loops = (loops[0], loops[1:]) if has_outer else (None, loops)
        column, rows, *shares = loops
        tile, lane_x, vec = sch.split(column, [None, plan.tx, plan.vector])
        if plan.across:
            part, lane_y = shares
        else:  # the thread's share: a block of the parts and a thread of the block
            part, lane_y = sch.split(shares[0], [None, plan.ty]) if shares else (None, None)
        blocks = [loop for loop in (tile, outer) if loop is not None] + ([part] if plan.parts > 1 else [])
        threads = ([lane_y] if plan.ty > 1 else []) + [lane_x]
        sch.reorder(*blocks, *threads, rows, vec)
        bx = fuse(sch, blocks)
        sch.bind(bx, "blockIdx.x")
        if plan.ty > 1:
            sch.bind(lane_y, "threadIdx.y")
        sch.bind(lane_x, "threadIdx.x")
        if plan.vector > 1:
            sch.vectorize(vec)
        if not _in_registers(sch, partial):  # summed in a register, stored once
            store = sch.cache_write(partial, 0, "local")
            sch.reverse_compute_at(store, lane_x)
        sch.decompose_reduction(partial, rows)
        return bx, lane_x

    def _across_threads(self, sch, work, bx, plan):
        """The `ty` partial results of each column reduced across the block's threads (every thread
        of the column gets the result); returns the threadIdx.x loop."""
        sch.reverse_compute_at(work, bx)
        loops = sch.get_loops(work)[1:]
        lane_y = _reduction_loop(sch, work, loops)
        column = fuse(sch, [loop for loop in loops if not sch.get(loop).same_as(sch.get(lane_y))])
        lane_x, vec = sch.split(column, [plan.tx, plan.vector])
        sch.reorder(lane_x, vec, lane_y)
        sch.bind(lane_x, "threadIdx.x")
        sch.bind(lane_y, "threadIdx.y")
        return lane_x

    def _plan(self, sch, block, outer, column, reduced, dims, split) -> Plan:
        """The block shape and the parts for `outer` x `column` results over `reduced` steps; `dims`:
        the extents of the kept axes that `column` fuses. A thread's vector, and a block's tile of
        columns, is a rectangle of them (TVM places the steps after the reduction by regions)."""
        width, count = get_extent(sch, column), get_extent(sch, reduced)
        rows = get_extent(sch, outer) if outer is not None else 1
        vector = self._lanes(sch, block, dims[-1])
        vectors = width // vector if isinstance(width, int) else None
        steps = count if isinstance(count, int) else SYMBOLIC
        rows = rows if isinstance(rows, int) else SYMBOLIC

        def shape(tx):  # (threads across, threads along the rows, threads in all)
            ty = _pow2_floor(max(1, min(self.threads // tx, steps // self.min_steps)))
            return tx, ty, rows * -(-(vectors or SYMBOLIC) // tx) * tx * ty

        def fits(tx):
            return _rectangle(tx * vector, dims)

        tx, ty, threads = shape(_threads_across(vectors, fits))
        # fewer threads across (a warp still reads rows of 32 contiguous elements or more) leave more
        # along the rows in each block: the grid fills before the reduction is cut into parts
        for narrower in (t for t in (16, 8) if t < tx and t * vector >= 32 and vectors and vectors % t == 0
                         and fits(t)):
            if threads >= self.min_threads:
                break
            tx, ty, threads = shape(narrower)
        parts = 1
        if split and threads < self.min_threads and steps >= 2 * self.min_steps * ty:
            parts = min(self.max_parts, _pow2_floor(-(-self.min_threads // threads)),
                        _pow2_floor(steps // (self.min_steps * ty)))
        # a ragged row (threads without a column) reduces within each thread only: a cross-thread
        # reduction would wait for threads that skip it
        return Plan(vector, tx, ty, parts, across=vectors is not None and vectors % tx == 0)

    def _lanes(self, sch, block, width) -> int:
        """Columns per thread: a vector of `vector_bytes` of the widest buffer read along the
        reduction (at most `max_lanes`), dividing the row."""
        if not isinstance(width, int):
            return 1
        stmt = sch.get(block)
        widest = max(tvm.DataType(r.source.ty.dtype).bits // 8 for r in stmt.reads)
        lanes = min(self.max_lanes, max(1, self.vector_bytes // widest))
        while lanes > 1 and width % lanes:
            lanes //= 2
        return lanes

    # -- element-wise blocks ----------------------------------------------------------------------
    def _spread(self, sch, block):
        """An element-wise block over more than the reduced shape (`x - x.mean(0)`), or one before
        the reduction that could not be inlined: a kernel of its own, a thread per vector of
        contiguous elements (as Elementwise has them), else per element."""
        loops = sch.get_loops(block)
        if not loops:
            loops = [sch.add_unit_loop(block)]
        size = static_product(sch, loops)
        widest = max(tvm.DataType(r.source.ty.dtype).bits // 8 for r in [*sch.get(block).reads, *sch.get(block).writes])
        vector = contiguous_lanes(sch, loops[-1], min(self.max_lanes, max(1, self.vector_bytes // widest)))
        vector = vector if size is not None and size % (vector * self.spread_threads) == 0 else 1
        bx, lane, vec = sch.split(fuse(sch, loops), [None, self.spread_threads, vector])
        sch.bind(bx, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        if vector > 1:
            sch.vectorize(vec)


def _threads_across(vectors, fits) -> int:
    """Threads of a block across a row of `vectors` vectors: the whole row up to 64, else 32 (or
    another divisor from 8 to 64, so that no thread is idle) where their columns `fit`, else 32 and
    a predicate."""
    if vectors is None:
        return 32
    if vectors <= 64:
        return vectors
    return next((t for t in [32, *range(64, 7, -1)] if vectors % t == 0 and fits(t)), 32)


def _rectangle(size: int, dims) -> bool:
    """Whether every `size` consecutive elements of the fused index over `dims` (from a multiple of
    `size`) are a rectangle of whole rows. Over one axis any run is; over several, a run within a
    row made TVM write the cross-thread reduction's column as a difference of quotients, which it
    then refused to bind to threads."""
    if len(dims) == 1:
        return True
    if not all(isinstance(d, int) for d in dims) or size % dims[-1]:
        return False
    size //= dims[-1]
    for dim in reversed(dims[:-1]):
        if size <= dim:
            return dim % size == 0
        if size % dim:
            return False
        size //= dim
    return True


def _in_registers(sch, block) -> bool:
    return sch.get(block).writes[0].source.ty.storage_scope == "local"


def _writes_param(sch, block) -> bool:
    params = [p for p in sch.mod["main"].params if tirx.is_buffer_var(p)]
    return any(w.source.same_as(p) for w in sch.get(block).writes for p in params)


def _reduction_loop(sch, block, loops):
    """The one of `loops` that the block's reduced axis is bound to."""
    realize = sch.get(loops[-1]).body
    value = next(v for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                 if iv.iter_type == tirx.IterVar.CommReduce)
    return next(loop for loop in loops if uses(value, sch.get(loop).loop_var))


def _wide_extents(sch, loops) -> list[str]:
    """The extents of the loops that are not unit loops, as text (symbolic sizes compare by name)."""
    return [str(e) for e in (get_extent(sch, loop) for loop in loops) if not (isinstance(e, int) and e == 1)]


def _pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)
