"""CPU rule CPUOuterReduction: reductions over outer or middle axes (`x.sum(0)`, `x.amax(1)` of a
(B, S, H) `x`, batch-norm statistics) read row after contiguous row, vectorised across the kept
columns; in parallel over the outer kept axes, else over chunks of the reduced rows (then a fold)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import fuse, is_buffer, kept_in_order, reduce_count, static_product
from .columns import Columns, columns
from .fast_math import isnan_form
from .tails import with_tails
from .cpu_rule import (CPURule, MIN_PARALLEL_ELEMENTWISE, MIN_PARALLEL_REDUCTION, pow2_divisor, vector_lanes,
                       vectorizable)
from .inlining import inline
from .lanes import contiguous_lanes
from .reasons import decline
from .siblings import same_block, siblings

SYMBOLIC = 4096  # what a symbolic extent counts for


class CPUOuterReduction(CPURule):
    """A reduction whose inputs keep their innermost axis, with element-wise blocks before and after
    it. Each parallel task sums whole rows into a row of results, `lanes` columns at a time, so it
    reads memory in order (a column at a time, or 32 columns, reads a new cache line per element and
    leaves the prefetcher behind):

    * many outer kept rows (a mean over the sequence of (B, S, H)): a task per row of results,
      or per tile of `max_row` columns of it, tiles halved (down to `min_tile` vectors, 512 bytes
      with AVX-512) until there are `tasks` tasks;
    * still too few (a column sum): the reduced rows are cut into chunks of at least `min_rows`,
      each summed by a task into a row of partial results (rfactor), which a second loop folds;
    * an element-wise block after it runs as a loop of its own, parallel and vectorised (rows of an
      odd width as plain loops, which LLVM vectorises with a tail); one with at most 1/8 of the
      elements of a block that reads it (a quantisation's per-column scale) stays a buffer;
    * argmax/argmin (index, value) pairs: tiles of whole vectors of columns in parallel, each column
      reduced in order (torch's first index of the maximum; NaN wins), never cut into chunks; an
      odd width is left to Dlight (a predicate on the lanes made TVM run every tile lane by lane).
    `decompose_reduction` comes last: after it TVM refuses to vectorise or parallelise loops above."""

    def __init__(self, tasks: int = 64, min_rows: int = 16, max_row: int = 4096, min_tile: int = 8):
        self.tasks, self.min_rows, self.max_row, self.min_tile = tasks, min_rows, max_row, min_tile

    def apply(self, func, target, tunable):
        # a ragged last tile of columns (an odd width) is a predicate on the vector lanes, which TVM
        # ran lane by lane (a max over axis 0 of (33, 13445): 1.6 ms, eager 0.1): whole vectors, then
        # a scalar tail (`with_tails`)
        # static sizes only: over a symbolic width of 0 the tail's bounds divide by a chunk count of 0
        self.together, self.joined = True, False
        try:
            sch = super().apply(func, target, tunable)
        except (s_tir.ScheduleError, tvm.error.InternalError):
            if not self.joined:
                raise
            self.together = False  # siblings that TVM would not run in one loop nest: a nest each
            sch = super().apply(func, target, tunable)
        static = all(isinstance(d, tirx.IntImm) for p in func.params if is_buffer(p) for d in p.ty.shape)
        return with_tails(sch) if sch is not None and static else sch

    def schedule(self, sch, infos, target):
        if all(info.is_injective() for info in infos):
            return False
        keep = [info for info in infos[:-1] if _per_column(sch, info.block_rv)]
        remaining = inline(sch, infos[:-1], keep=[info.block_rv for info in keep])
        blocks = kept_in_order(infos[:-1], remaining, keep) + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        layouts = [columns(sch, b) for b in reductions]
        if not reductions or any(layout is None for layout in layouts):
            return False
        lanes = vector_lanes(sch, target) if vectorizable(sch) else 1
        sets = siblings(sch, reductions, layouts) if self.together else [[b] for b in reductions]
        self.joined = any(len(group) > 1 for group in sets)
        for block in blocks:
            if reduce_count(sch, block):
                group = next((g for g in sets if same_block(sch, g[0], block)), None)
                if group is None:
                    continue  # scheduled with the first of its siblings
                layout = layouts[next(i for i, b in enumerate(reductions) if same_block(sch, b, block))]
                if not self._reduce(sch, group, layout, lanes):
                    return decline("(index, value) pairs over columns that whole vectors don't tile")
            else:
                self._spread(sch, block, lanes)
        return True

    # whether siblings (`siblings`) share one loop nest (off where TVM refused that), and whether some did
    together, joined = True, False

    def _reduce(self, sch, blocks, layout, lanes):
        """Reductions over the same loops (`blocks`: siblings reading one input, in one loop nest
        where whole tiles of whole vectors cover the columns) as [outer kept x tiles of columns
        (parallel), reduced, columns (vector)], or, with too few such tasks, in chunks of rows
        (`_chunks`)."""
        loops = sch.get_loops(blocks[0])
        n_kept = layout.n_outer + layout.n_inner
        layout = self._narrowed(sch, loops, layout)
        nests = []
        for block in blocks:
            loops = sch.get_loops(block)
            outer = fuse(sch, loops[:layout.n_outer]) if layout.n_outer else None
            nests.append((outer, fuse(sch, loops[layout.n_outer:n_kept]), fuse(sch, loops[n_kept:])))
        plan = self._plan(sch, blocks, nests[0], lanes)
        width = get_extent(sch, nests[0][1])
        whole = plan is not None and isinstance(width, int) and width % plan[0] == 0 and plan[0] % lanes == 0
        if len(blocks) > 1 and not whole and any(len(sch.get(b).writes) > 1 for b in blocks):
            # pairs over columns that whole tiles of vectors don't cover, beside other reductions
            # (which Dlight would then take too): the columns one at a time, each pair in order
            lanes = 1
            plan = self._plan(sch, blocks, nests[0], lanes)
        elif len(blocks) > 1 and not whole:
            # a ragged tile's tail (`with_tails`) is cut for one block alone: a nest each
            return all([self._nest(sch, [b], [n], lanes) for b, n in zip(blocks, nests)])
        return plan is not None and self._nest(sch, blocks, nests, lanes)

    def _plan(self, sch, blocks, nest, lanes):
        """(columns per task, chunks of rows, whether in parallel) for reductions over the `nest`
        (outer, column, reduced), or None for pairs it leaves to Dlight."""
        outer, column, reduced = nest
        width, count = get_extent(sch, column), get_extent(sch, reduced)
        rows = get_extent(sch, outer) if outer is not None else 1
        rows = rows if isinstance(rows, int) else SYMBOLIC
        # argmax's (index, value) pairs: each column reduced in order, never in chunks (the pair's
        # combiner is torch's only in order: the first index of the maximum, or of the first NaN)
        pairs = any(len(sch.get(b).writes) > 1 for b in blocks)
        if pairs and (not isinstance(width, int) or pow2_divisor(width, lanes) < min(lanes, 4)):
            # a ragged last tile puts a predicate on the lanes, and TVM then runs every tile's pairs
            # lane by lane: an argmax over 173 columns took 2.5 times Dlight's one column per task
            return None
        tile = self._pair_tile(width, rows, lanes) if pairs else self._tile(width, rows, lanes)
        tiles = -(-width // tile) if isinstance(width, int) else SYMBOLIC // tile
        work = static_product(sch, sch.get_loops(blocks[0]))
        threads = work is None or work > MIN_PARALLEL_REDUCTION
        steps = count if isinstance(count, int) else SYMBOLIC
        parts = 1
        if threads and not pairs and rows * tiles < self.tasks and steps >= 2 * self.min_rows:
            parts = min(self.tasks // (rows * tiles), steps // self.min_rows)
        return tile, parts, threads

    def _nest(self, sch, blocks, nests, lanes) -> bool:
        """The reductions scheduled by their plan, in one loop nest (`_merged`)."""
        plan = self._plan(sch, blocks, nests[0], lanes)
        if plan is None:
            return False
        tile, parts, threads = plan
        if parts > 1:
            self._chunks(sch, blocks, nests[0][0] is not None, parts, tile, lanes)
            return True
        for block, (outer, column, reduced) in zip(blocks, nests):
            tiled, inner = sch.split(column, [None, tile])
            spread = [loop for loop in (outer, tiled) if loop is not None]
            sch.reorder(*spread, reduced, inner)
            fuse(sch, spread)
        spread, reduced, inner = _merged(sch, blocks)
        for block in blocks:
            if len(sch.get(block).writes) > 1:
                _nan_tests_as_compares(sch, block)
        self._vectorize(sch, inner, lanes)
        if threads:
            sch.parallel(spread)
        for block in blocks:
            sch.decompose_reduction(block, reduced)
        return True

    def _narrowed(self, sch, loops, layout):
        """The layout with contiguous kept axes beyond a row of `max_row` counted as outer rows
        (197 x 1000 of a (15, 197, 1000) max: 197 rows of 1000): one fused loop of them was tiled
        raggedly, a predicate and a division per element."""
        n_kept, n_outer = layout.n_outer + layout.n_inner, layout.n_outer
        while n_kept - n_outer > 1 and not _row_fits(sch, loops[n_outer:n_kept], self.max_row):
            n_outer += 1
        return Columns(n_outer, n_kept - n_outer, layout.n_reduced)

    def _tile(self, width, rows, lanes) -> int:
        """Columns per task: the row up to `max_row`, halved while there are fewer than `tasks`
        tasks and the halves stay at least `min_tile` whole vectors, rather than cutting the rows
        into chunks that need a fold. (One Zen 3 thread summed (16, 197, 768) over the middle axis
        as fast in tiles of 8 vectors as of 16, and 8 left no fold to 16 AVX-512 cores.)"""
        if not isinstance(width, int):
            return self.max_row
        tile = width if width <= self.max_row else _dividing(width, self.max_row, lanes, self.min_tile * lanes)
        while rows * -(-width // tile) < self.tasks and tile % (2 * lanes) == 0 and tile // 2 >= self.min_tile * lanes \
                and width % (tile // 2) == 0:
            tile //= 2
        return tile

    def _pair_tile(self, width, rows, lanes) -> int:
        """Columns per task for (index, value) pairs, which are never cut into chunks of rows: as few
        as give `tasks` tasks, at least PAIR_TILE (a 64-byte cache line of float32), in whole vectors
        (an argmax over axis 0 of (2048, 173): 11 tasks of 16 columns)."""
        if not isinstance(width, int):
            return self.max_row
        want = -(-self.tasks // rows)
        least = max(lanes, self.PAIR_TILE)
        tile = min(max(least, -(-width // want // lanes) * lanes), width) if want > 1 else min(width, self.max_row)
        return _dividing(width, tile, lanes, least) if width % tile else tile

    PAIR_TILE = 16

    def _chunks(self, sch, blocks, has_outer, parts, tile, lanes):
        """Each task sums a chunk of the rows of a tile of columns into a row of partial results
        (rfactor; siblings' in one loop nest); a second loop folds them, for each block. (The columns
        are tiled after rfactor: a predicate on them before it would not reach the fold.)"""
        partials = []
        for block in blocks:
            reduced = sch.get_loops(block)[-1]
            count = get_extent(sch, reduced)
            # a symbolic count: `parts` chunks whatever it is (an empty one's partial results are still
            # initialised: only the update is predicated)
            chunk, _ = sch.split(reduced, [None, -(-count // parts)] if isinstance(count, int) else [parts, None])
            partial = sch.rfactor(chunk, factor_axis=0)
            loops = sch.get_loops(partial)
            outer, loops = ([loops[0]], loops[1:]) if has_outer else ([], loops)
            column, chunk, step = loops
            tiled, inner = sch.split(column, [None, tile])
            sch.reorder(chunk, *outer, tiled, step, inner)
            fuse(sch, [chunk, *outer, tiled])
            partials.append(partial)
        spread, step, inner = _merged(sch, partials)
        sch.parallel(spread)
        self._vectorize(sch, inner, lanes)
        for partial in partials:
            sch.decompose_reduction(partial, step)
        for block in blocks:
            self._fold(sch, block, tile, lanes)

    def _fold(self, sch, block, tile, lanes):
        """The loop folding a block's chunks of partial results: rows of them vectorised, tiles of a
        wide row in parallel."""
        *kept, chunk = sch.get_loops(block)  # the fold: [outer, columns, chunks]
        row = fuse(sch, kept)
        size, width = static_product(sch, [row, chunk]), get_extent(sch, row)
        piece = tile if not isinstance(width, int) or width > tile else _piece(width)
        if (size is None or size >= MIN_PARALLEL_ELEMENTWISE) and piece is not None:
            tiled, row = sch.split(row, [None, piece])  # a wide row: tiles of it in parallel
            sch.reorder(tiled, chunk, row)
            sch.parallel(tiled)
        else:
            sch.reorder(chunk, row)
        self._vectorize(sch, row, lanes)
        sch.decompose_reduction(block, chunk)

    @staticmethod
    def _vectorize(sch, loop, lanes):
        """Whole vectors of `lanes` columns where they tile the loop, or one narrower vector that is
        the whole loop; an odd row of at least two vectors split raggedly (`with_tails` cuts its last
        vector off: a softmax over the outer axis of 23 columns ran its sin and tanh a lane at a
        time); else LLVM's loop vectoriser takes the contiguous loop as it is."""
        extent = get_extent(sch, loop)
        vector = pow2_divisor(extent, lanes)
        if vector == lanes > 1 or vector == extent >= 4:  # (8 columns: a vector of 8 with 16 lanes)
            sch.vectorize(sch.split(loop, [None, vector])[1])
        elif lanes > 1 and isinstance(extent, int) and extent >= 2 * lanes:
            sch.vectorize(sch.split(loop, [None, lanes])[1])

    def _spread(self, sch, block, lanes):
        """An element-wise block (a mean's division, `x - x.mean(0)`): a loop of its own, the
        innermost `lanes` vectorised where whole vectors tile it and every access is contiguous. Else
        (an odd row of kept columns: (854, 12, 197)) rows of at most ROW contiguous elements, each a
        plain loop that LLVM vectorises with a tail, in parallel: one fused loop of single elements
        divided by the odd row per element and stayed scalar."""
        loops = sch.get_loops(block)
        if not loops:
            return
        total = static_product(sch, loops)
        threads = total is None or total >= MIN_PARALLEL_ELEMENTWISE
        vector = contiguous_lanes(sch, loops[-1], lanes) if lanes > 1 else 1
        if vector == lanes > 1 and pow2_divisor(total, vector) == vector or len(loops) == 1:
            fused = fuse(sch, loops)
            if vector > 1 and pow2_divisor(total, vector) == vector:
                fused, lane = sch.split(fused, [None, vector])
                sch.vectorize(lane)
            if threads:
                sch.parallel(fused)
            return
        n_row = 1
        while n_row < len(loops) - 1 and _row_fits(sch, loops[-n_row - 1:], self.ROW):
            n_row += 1
        row = fuse(sch, loops[-n_row:])
        if pow2_divisor(get_extent(sch, row), lanes) == lanes > 1 and vector > 1:
            sch.vectorize(sch.split(row, [None, lanes])[1])
        if threads:
            sch.parallel(fuse(sch, loops[:-n_row]))

    ROW = 4096  # contiguous elements of an element-wise block's row (`_spread`)


def _merged(sch, blocks) -> list:
    """The loops of blocks over equal loop nests merged into one (it takes the first block's place:
    TVM puts it where the last loop it is given was), each block reading the input there: the
    merged loops, outermost first."""
    if len(blocks) > 1:
        sch.merge(*[sch.get_loops(b)[-1] for b in reversed(blocks)])
    return sch.get_loops(blocks[0])


def _nan_tests_as_compares(sch, block) -> None:
    """The block with each `isnan(v)` of its (index, value) combiner written as a test of v's bits
    (exponent all ones, mantissa not zero: `bits & ~sign > bits of inf`). TVM's vectoriser cannot
    vectorise `isnan`: it ran the pair's Lets lane by lane, then stored one lane's value in all of them
    (wrong indices); and it folds the float forms away (`not v == v`, `not (v < 0 or v >= 0)`)."""
    def compare(call):
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.isnan"):
            return call
        return isnan_form(call)
    old = sch.get(block)
    new = tvm_ffi.structural_map(old, [(tvm.ir.Call, compare)])
    if not new.same_as(old):
        sch.state.replace(sch.get_sref(block), new, {old: new})


def _dividing(width: int, most: int, lanes: int, least: int) -> int:
    """The largest multiple of `lanes` from `least` to `most` that divides `width` (32000 in 8 tiles of
    4000, not 7.8 of 4096: no predicate on the last tile's lanes), else `most`."""
    return next((t for t in range(most - most % lanes, least - 1, -lanes) if t and width % t == 0), most)


def _piece(width: int) -> int | None:
    """A fold's row of `width` results in at least 8 pieces of at least 64 whole columns that
    divide it (2364: 12 of 197), for threads; None for none."""
    return next((d for d in range(width // 8, 63, -1) if width % d == 0), None)


def _per_column(sch, block) -> bool:
    """An element-wise block with at most 1/SMALL of the elements of a block that reads it (a
    quantisation's scale from a column maximum, read by every element of x / scale): kept as a
    buffer, computed once per column, rather than inlined and recomputed for every element."""
    if reduce_count(sch, block):
        return False
    size = static_product(sch, sch.get_loops(block))
    return size is not None and any(
        (other := static_product(sch, sch.get_loops(c))) is not None and other >= SMALL * size
        for c in sch.get_consumers(block))


SMALL = 8


def _row_fits(sch, loops, most: int) -> bool:
    """Whether the loops have static extents of at most `most` elements in all."""
    size = static_product(sch, loops)
    return size is not None and size <= most
