"""GPU rule OuterReduction: reductions over outer or middle axes (`x.sum(0)`, `x.amax(1)`,
`x.max(dim=0)`'s values and indices of a (B, S, H) `x`, batch-norm statistics), threads across the
kept contiguous axis so that a warp reads whole rows, the reduced axes looped per thread, split over
blocks in two stages when the kept columns are too few to fill the GPU."""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import fuse, normalized, reduce_count, static_product, uses
from .columns import columns
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import contiguous_lanes
from .siblings import decompose, siblings
from .siblings import same_block as _same_block

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
    * a short reduction (fewer than `2 * min_steps` rows: one thread along it) has every kept
      column side by side, outer rows too, and a block's `threads` all across them;
    * where no tile of 8 to 64 threads across is whole rows of the kept axes fused ((128, 150) in
      float16), the outer kept axes count as rows of blocks instead; the parts are blockIdx.y
      (fused into blockIdx.x with a tile of two kept axes, TVM bound the cross-thread step to a
      difference of quotients and refused it: p104's (32, 12, 16) columns went to Fallback);
    * argmax/argmin's (index, value) pairs (legalize.py's combiner: NaN first, then the first index
      of ties, so no order of partial results changes the answer; max_argmax.py gives torch's
      `x.max(dim)` both from one) are reduced alike, a thread's columns unrolled, not vectorised:
      TVM's vectoriser runs the pair's Lets lane by lane, then stores the last lane's pair in
      every lane (an H200 saw the wrong indices). At most `pair_rows` threads along their rows:
      a pair's cross-thread steps cost far more than a sum's. Their update is branch-free in CUDA
      (lowering/register_selects.py);
    * a block after the reduction over the reduced shape (a mean's division) runs where the last
      stage leaves each result, in a register; one over a larger shape (`x - x.mean(0)`) is a
      kernel of its own, 16 bytes per thread.
    Each reduction is a kernel of its own: a second reduction that reads the first one's result
    (a variance after its mean) must wait for every block of the first. On an H200 (benchmarks/probes/outer.py):
    a (32, 2048, 1024) max over the middle axis took 68 us where Fallback took 190 and torch.compile
    76; a (2^20, 4) column sum 20 us, Dlight's Reduction (one block) 656."""

    # min_threads: an H200 holds 132 x 2048 threads, and bandwidth follows the loads in flight: with
    # one 16-byte load a thread (nvcc keeps each predicated load of the row loop behind its branch)
    # p105's (56306, 512) norm at 2^16 threads (16 parts) read 115 MB at about 1 TB/s. `stage_rows`
    # rows a thread are loaded together where they go through registers (`_staged`). `pair_rows`: threads
    # along the rows of an argmax's (index, value) pairs, at most; each step of their cross-thread
    # reduction is some 100 instructions a column (volatile shared loads, 64-bit indices, a barrier), so
    # fewer steps, and parts where the grid needs threads. H200: p46's (967, 32000) float16 argmax 54.2 us
    # with 32 along the rows, 49.5 with 8, 44.1 with 4; p56's 53.1 with 8, 44.4 with 4
    def __init__(self, threads: int = 256, min_steps: int = 16, min_threads: int = 1 << 18,
                 max_parts: int = 128, vector_bytes: int = 16, max_lanes: int = 4, spread_threads: int = 256,
                 stage_rows: int = 4, staged_lanes: int = 8, pair_rows: int = 4):
        self.threads, self.min_steps, self.min_threads = threads, min_steps, min_threads
        self.pair_rows = pair_rows
        self.max_parts, self.vector_bytes, self.max_lanes = max_parts, vector_bytes, max_lanes
        self.spread_threads, self.stage_rows, self.staged_lanes = spread_threads, stage_rows, staged_lanes

    def apply(self, func, target, _tunable):
        scheduled = self._apply(func, target, together=True)
        if scheduled is False:  # siblings that TVM would not run in one loop nest: a launch each
            scheduled = self._apply(func, target, together=False)
        return scheduled

    def _apply(self, func, target, together: bool):
        """The schedule, or None where the rule does not apply; False where `together` failed."""
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        layouts = [columns(sch, b) for b in reductions]
        if not reductions or any(layout is None for layout in layouts):
            return None
        sets = siblings(sch, reductions, layouts) if together else [[b] for b in reductions]
        homes = []  # (a reduction or its epilogue, its kept extents, the loop where what reads it may run)
        for block in blocks:
            if reduce_count(sch, block):
                group = next((g for g in sets if _same_block(sch, g[0], block)), None)
                if group is None:
                    continue  # scheduled with the first of its siblings
                local = [self._local(sch, b, group) for b in group]
                kept = [_kept(sch, b) for b in group]  # (before the loops are cut)
                try:
                    lanes = self._reduce(sch, group, layouts[_index(sch, reductions, block)])
                except (s_tir.ScheduleError, tvm.error.InternalError):
                    if len(group) > 1:
                        return False
                    raise
                homes += [(b, k, lane if keep else None) for b, k, lane, keep in zip(group, kept, lanes, local)]
                continue
            extents = _wide_extents(sch, sch.get_loops(block))
            home = next((h for b, kept, h in homes if h is not None and kept == extents and any(
                _same_block(sch, b, p) for p in sch.get_producers(block))), None)
            if home is not None and not _reads_stored(sch, block, homes):  # (what reads it in turn may follow it there)
                sch.reverse_compute_at(block, home, preserve_unit_loops=True)
                homes.append((block, extents, home))
            else:
                self._spread(sch, block)
        return sch

    @staticmethod
    def _local(sch, block, group) -> bool:
        """Whether the results stay in registers: every block reading them runs in its fold (over
        the same kept extents, reading no sibling's results, which another thread may hold)."""
        kept = _kept(sch, block)
        local = not _writes_param(sch, block) and all(
            not reduce_count(sch, c) and _wide_extents(sch, sch.get_loops(c)) == kept and not any(
                _same_block(sch, p, b) for p in sch.get_producers(c) for b in group if not _same_block(sch, b, block))
            for c in sch.get_consumers(block))
        if local:
            _in_scope(sch, block, "local")
        return local

    # -- one reduction, or several over the same rows ---------------------------------------------
    def _reduce(self, sch, blocks, layout):
        """Schedule column reductions over the same loops (`blocks`, siblings reading one input) in
        one loop nest; returns, for each, the loop (one iteration per result) where an element-wise
        block over the reduced shape can follow it (a mean's division)."""
        loops = sch.get_loops(blocks[0])
        n_kept = layout.n_outer + layout.n_inner
        steps = static_product(sch, loops[n_kept:])
        if steps is not None and steps < 2 * self.min_steps:
            n_outer = 0  # a short reduction, a thread per column: the outer rows side by side in blocks too
        else:
            n_outer = self._narrowed(sch, blocks, loops[:n_kept], layout.n_outer)
        dims = _wide_extents(sch, loops[n_outer:n_kept], text=False) or [1]
        # loads through registers (`_staged`) for one block over one kept axis and one reduced axis:
        # TVM bounds a thread's share of a tile of several (p104's (32, 12, 16) columns, a (2, 17)
        # reduction) by its bounding box, 3024 registers a thread where it needs 4
        stage = len(blocks) == 1 and len(dims) == 1 and len(_wide_extents(sch, loops[n_kept:])) <= 1
        nests = []
        for block in blocks:
            loops = sch.get_loops(block)
            nests.append((fuse(sch, loops[:n_outer]) if n_outer else None, fuse(sch, loops[n_outer:n_kept]),
                          fuse(sch, loops[n_kept:])))
        return self._stage(sch, blocks, nests, dims, stage=stage)

    def _narrowed(self, sch, blocks, kept, n_outer) -> int:
        """How many kept loops count as outer rows: those of `n_outer`, then more while no tile of
        columns (`_threads_across`) is a rectangle of the fused kept axes ((128, 150) in float16:
        no 32 to 64 threads of 2 columns make whole rows of 150; TVM then sized the cross-thread
        step as the tiles' bounding box), or an extent is symbolic."""
        while n_outer < len(kept) - 1:
            dims = _wide_extents(sch, kept[n_outer:], text=False)
            if len(dims) <= 1:
                break
            if all(isinstance(d, int) for d in dims):
                vector = self._lanes(sch, blocks, dims, stage=False)
                vectors = static_product(sch, kept[n_outer:]) // vector
                if vectors <= 64 or any(vectors % t == 0 and _rectangle(t * vector, dims) for t in _ACROSS):
                    break
            n_outer += 1
        return n_outer

    def _stage(self, sch, blocks, nests, dims, split=True, stage=False):
        """One stage: blocks of threads over tiles of the columns; where the plan cuts the reduction
        into parts, their partial results (rfactor) are then folded by a stage of their own, a
        column reduction over the parts. `nests`: each block's (outer, column, reduced) loops;
        `dims`: the extents of the kept axes fused into `column` (`outer`: the others). Siblings
        are cut alike, their partial results computed in one loop nest (each reads the input
        there); `stage`: the first stage's loads go through registers. Returns each block's
        threadIdx.x loop of the last stage."""
        outer, column, reduced = nests[0]
        plan = self._plan(sch, blocks, outer, column, reduced, dims, split, stage)
        # each thread's share of the rows: ((i * parts + part) * ty + y) * group + j
        shares = plan.parts if plan.across else plan.parts * plan.ty
        group = self._group(sch, reduced, shares * (plan.ty if plan.across else 1)) if stage else 1
        last = [group] if group > 1 else []
        works, partials = [], []
        for block, (_, _, reduced) in zip(blocks, nests):
            sch.split(reduced, ([None, shares, plan.ty] if plan.across else [None, shares]) + last)
            work = block
            if shares > 1:
                work = sch.rfactor(sch.get_loops(block)[(-2 if plan.across else -1) - len(last)], factor_axis=0)
            partial = work
            if plan.across and plan.ty > 1:  # each thread's partial result, in registers
                partial = sch.rfactor(sch.get_loops(work)[-1 - len(last)], factor_axis=0)
                _in_scope(sch, partial, "local")
            works.append(work)
            partials.append(partial)
        bx, lane_x = self._in_thread(sch, partials, plan, outer is not None, group, stage)
        lanes = [lane_x] * len(blocks)
        if plan.across and plan.ty > 1:
            lanes = [self._across_threads(sch, work, bx, plan) for work in works]
        if shares == 1:
            return lanes
        folds = []
        for block in blocks:  # the fold: [outer, columns, parts], contiguous along the columns
            *kept, parts = sch.get_loops(block)
            folds.append((kept[0] if len(kept) > 1 else None, kept[-1], parts))
        return self._stage(sch, blocks, folds, dims, split=False)

    def _in_thread(self, sch, partials, plan, has_outer, group=1, stage=False):
        """Each thread's loop over its rows, [blocks, threadIdx.y, threadIdx.x, rows, vector], with
        its partial results in registers (siblings' in one loop nest), the vector's columns loaded at
        once (`columns`: every read along the columns has them last, contiguous); returns the block
        and the threadIdx.x loops."""
        if len(partials) > 1:  # (the merged nest takes the last loop's place: the first block's)
            sch.merge(*[sch.get_loops(p)[-1] for p in reversed(partials)])
        loops = sch.get_loops(partials[0])
        outer, loops = (loops[0], loops[1:]) if has_outer else (None, loops)
        column, rows, *shares = loops
        if group > 1:  # a group of consecutive rows, inside the thread's loop over groups
            *shares, j = shares
        tile, lane_x, vec = sch.split(column, [None, plan.tx, plan.vector])
        if plan.across:
            part, lane_y = shares
        else:  # the thread's share: a block of the parts and a thread of the block
            part, lane_y = sch.split(shares[0], [None, plan.ty]) if shares else (None, None)
        blocks = [loop for loop in (tile, outer) if loop is not None]
        parts = [part] if plan.parts > 1 else []
        threads = ([lane_y] if plan.ty > 1 else []) + [lane_x]
        sch.reorder(*parts, *blocks, *threads, rows, *([j] if group > 1 else []), vec)
        bx = fuse(sch, blocks)
        sch.bind(bx, "blockIdx.x")
        if parts:
            sch.bind(part, "blockIdx.y")
        if plan.ty > 1:
            sch.bind(lane_y, "threadIdx.y")
        sch.bind(lane_x, "threadIdx.x")
        staged = stage and self._staged(sch, partials, rows, plan)
        if group > 1:
            sch.unroll(j)
        if plan.vector > 1 and (staged or plan.vector > self.max_lanes or any(
                len(sch.get(p).writes) > 1 for p in partials)):
            # an argmax's (index, value) update: TVM's vectoriser runs its Lets lane by lane, then
            # stores the last lane's pair in every lane; staged loads: the math on registers; eight
            # halves summed in float32 would be a float8, which CUDA lacks
            sch.unroll(vec)
        elif plan.vector > 1:
            sch.vectorize(vec)
        for partial in partials:
            if not _in_registers(sch, partial):  # summed in a register, stored once
                for i in range(len(sch.get(partial).writes)):  # (an argmax's index and value)
                    sch.reverse_compute_at(sch.cache_write(partial, i, "local"), lane_x)
        for partial in partials:
            decompose(sch, partial, rows)
        return bx, lane_x

    def _group(self, sch, reduced, threads) -> int:
        """Rows a thread loads together (`stage_rows`), consecutive ones, where each of the
        `threads` along the reduction has at least two groups of them, else 1."""
        steps = get_extent(sch, reduced)
        steps = steps if isinstance(steps, int) else SYMBOLIC
        return 1 if steps < 2 * self.stage_rows * threads else self.stage_rows

    def _staged(self, sch, partials, rows, plan) -> bool:
        """Each group of a thread's rows (`_group`: consecutive, a compact block of registers; or
        each row) has its vectors of every input loaded before any is reduced: the loads are in
        flight together (nvcc kept each predicated load of the plain loop behind its branch, one
        load in flight a thread), 16 bytes each however the update is computed (an argmax's
        unrolled pairs loaded whole, not an element at a time). Returns whether it did."""
        (partial,) = partials
        stmt = sch.get(partial)
        inputs = [i for i, r in enumerate(stmt.reads) if r.source.ty.storage_scope == "global" and len(r.region)
                  and not any(r.source.same_as(w.source) for w in stmt.writes)]
        depth = next(i for i, loop in enumerate(sch.get_loops(partial)) if sch.get(loop).same_as(sch.get(rows))) + 1
        caches = [sch.cache_read(partial, i, "local", consumer_blocks=[partial]) for i in inputs]
        for cache in caches:  # (made first: the read indices are the block's before any cache)
            sch.compute_at(cache, rows, preserve_unit_loops=True)
            loops = sch.get_loops(cache)[depth:]
            if loops and get_extent(sch, loops[-1]) == plan.vector > 1:
                sch.vectorize(loops.pop())
            for loop in loops:
                if isinstance(get_extent(sch, loop), int):  # (a tile across rows of kept axes: a bound per thread)
                    sch.unroll(loop)
        return bool(caches)

    def _across_threads(self, sch, work, bx, plan):
        """The `ty` partial results of each column reduced across the block's threads (every thread
        of the column gets the result); returns the threadIdx.x loop."""
        sch.reverse_compute_at(work, bx)
        loops = sch.get_loops(work)
        loops = loops[next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(bx))) + 1:]
        lane_y = _reduction_loop(sch, work, loops)
        column = fuse(sch, [loop for loop in loops if not sch.get(loop).same_as(sch.get(lane_y))])
        lane_x, vec = sch.split(column, [plan.tx, plan.vector])
        sch.reorder(lane_x, vec, lane_y)
        sch.bind(lane_x, "threadIdx.x")
        sch.bind(lane_y, "threadIdx.y")
        if plan.vector > 1:  # the thread's columns unrolled by nvcc (`#pragma unroll`; unrolled in TIR, the
            # copies of the all-reduce shared its buffers, which TVM refused): a loop indexed the thread's
            # partial results, which nvcc then kept on the stack (p46's argmax: 304 bytes, a store a row)
            sch.unroll(vec)
            sch.annotate(vec, "pragma_unroll_explicit", 0)
        return lane_x

    def _plan(self, sch, blocks, outer, column, reduced, dims, split, stage) -> Plan:
        """The block shape and the parts for `outer` x `column` results over `reduced` steps; `dims`:
        the extents of the kept axes that `column` fuses. A thread's vector, and a block's tile of
        columns, is a rectangle of them (TVM places the steps after the reduction by regions)."""
        width, count = get_extent(sch, column), get_extent(sch, reduced)
        rows = get_extent(sch, outer) if outer is not None else 1
        vector = self._lanes(sch, blocks, dims, stage)
        vectors = width // vector if isinstance(width, int) else None
        steps = count if isinstance(count, int) else SYMBOLIC
        rows = rows if isinstance(rows, int) else SYMBOLIC

        most_ty = self.pair_rows if any(len(sch.get(b).writes) > 1 for b in blocks) else self.threads

        def shape(tx):  # (threads across, threads along the rows, threads in all)
            ty = _pow2_floor(max(1, min(self.threads // tx, steps // self.min_steps, most_ty)))
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
            if shape(narrower)[2] > threads:  # only where it puts more threads along the rows
                tx, ty, threads = shape(narrower)
        if ty == 1 and (vectors is None or vectors > tx):
            # one thread along a short reduction: a block's threads all across, a ragged last tile
            # predicated, and no tile need be whole rows (no cross-thread step places a region
            # over it; each thread's vector is in one row). Blocks of 16 threads left SMs a quarter full
            tx = next((t for t in (self.threads, self.threads // 2, 64) if t <= (vectors or SYMBOLIC)), tx)
        parts = 1
        if split and threads < self.min_threads and steps >= 2 * self.min_steps * ty:
            parts = min(self.max_parts, _pow2_floor(-(-self.min_threads // threads)),
                        _pow2_floor(steps // (self.min_steps * ty)))
        # a ragged row (threads without a column) reduces within each thread only: a cross-thread
        # reduction would wait for threads that skip it
        return Plan(vector, tx, ty, parts, across=vectors is not None and vectors % tx == 0)

    def _lanes(self, sch, blocks, dims, stage) -> int:
        """Columns per thread: a vector of `vector_bytes` of the widest buffer the reductions read
        (at most `max_lanes`; `staged_lanes` where the loads go through registers, `stage`, and the
        row is wide: eight halves in one 16-byte load), dividing the row; `dims`: the kept axes of
        the columns."""
        width = dims[-1]
        if not isinstance(width, int):
            return 1
        widest = max(tvm.DataType(r.source.ty.dtype).bits // 8 for b in blocks for r in sch.get(b).reads)
        # (wider vectors only across a warp's worth of them: on fewer columns they would leave fewer
        # threads, a (1000, 64) bfloat16 mean one block of 8 threads across)
        most = self.staged_lanes if stage and width >= 32 * self.staged_lanes else self.max_lanes
        lanes = min(most, max(1, self.vector_bytes // widest))
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


_ACROSS = (32, *range(64, 7, -1))  # threads across a row of columns, in order of preference


def _threads_across(vectors, fits) -> int:
    """Threads of a block across a row of `vectors` vectors: the whole row up to 64, else 32 (or
    another divisor from 8 to 64, so that no thread is idle) where their columns `fit`, else 32 and
    a predicate."""
    if vectors is None:
        return 32
    if vectors <= 64:
        return vectors
    return next((t for t in _ACROSS if vectors % t == 0 and fits(t)), 32)


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


def _index(sch, blocks, block) -> int:
    return next(i for i, b in enumerate(blocks) if _same_block(sch, b, block))


def _kept(sch, block) -> list:
    """The extents of a reduction's kept loops that are not unit loops, as text."""
    loops = sch.get_loops(block)
    return _wide_extents(sch, loops[:len(loops) - reduce_count(sch, block)])


def _in_registers(sch, block) -> bool:
    return all(w.source.ty.storage_scope == "local" for w in sch.get(block).writes)


def _in_scope(sch, block, scope: str) -> None:
    """Every buffer the block writes (both of an argmax's (index, value) pairs) in `scope`."""
    for i in range(len(sch.get(block).writes)):
        sch.set_scope(block, i, scope)


def _writes_param(sch, block) -> bool:
    params = [p for p in sch.mod["main"].params if tirx.is_buffer_var(p)]
    return any(w.source.same_as(p) for w in sch.get(block).writes for p in params)


def _reads_stored(sch, block, homes) -> bool:
    """Whether `block` reads what a block run in a reduction's fold stores to an output. TVM runs a
    block that reads a cross-thread result in one thread of the column (threadIdx.y == 0), so the
    column's other threads would read the output before that thread stores it (p158: `h` stored,
    then `h.abs()` read it back in the same launch); such a block is a launch of its own."""
    folded = [b for b, _, home in homes if home is not None]
    return any(_writes_param(sch, p) and any(_same_block(sch, p, b) for b in folded)
               for p in sch.get_producers(block))


def _reduction_loop(sch, block, loops):
    """The one of `loops` that the block's reduced axis is bound to."""
    realize = sch.get(loops[-1]).body
    value = next(v for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                 if iv.iter_type == tirx.IterVar.CommReduce)
    return next(loop for loop in loops if uses(value, sch.get(loop).loop_var))


def _wide_extents(sch, loops, text: bool = True) -> list:
    """The extents of the loops that are not unit loops, as text (symbolic sizes compare by name)
    or as they are (ints, symbolic expressions)."""
    extents = [e for e in (get_extent(sch, loop) for loop in loops) if not (isinstance(e, int) and e == 1)]
    return [str(e) for e in extents] if text else extents


def _pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)
