"""CPU rule CPUOuterReduction: reductions over outer or middle axes (`x.sum(0)`, `x.amax(1)` of a
(B, S, H) `x`, batch-norm statistics) read row after contiguous row, vectorised across the kept
columns; in parallel over the outer kept axes, else over chunks of the reduced rows (then a fold)."""
from __future__ import annotations

from tvm.s_tir.dlight.base import get_extent

from .analysis import fuse, kept_in_order, reduce_count, static_product
from .columns import columns
from .cpu_rule import (CPURule, MIN_PARALLEL_ELEMENTWISE, MIN_PARALLEL_REDUCTION, pow2_divisor, vector_lanes,
                       vectorizable)
from .inlining import inline
from .lanes import contiguous_lanes
from .reasons import decline

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
    * an element-wise block after it runs as a loop of its own, parallel and vectorised.
    `decompose_reduction` comes last: after it TVM refuses to vectorise or parallelise loops above."""

    def __init__(self, tasks: int = 64, min_rows: int = 16, max_row: int = 4096, min_tile: int = 8):
        self.tasks, self.min_rows, self.max_row, self.min_tile = tasks, min_rows, max_row, min_tile

    def schedule(self, sch, infos, target):
        if all(info.is_injective() for info in infos):
            return False
        remaining = inline(sch, infos[:-1])
        blocks = kept_in_order(infos[:-1], remaining, []) + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        layouts = [columns(sch, b) for b in reductions]
        if not reductions or any(layout is None for layout in layouts):
            return False
        if any(len(sch.get(b).writes) != 1 for b in reductions):
            return decline("two results per reduction (an argmax's index and value)")
        lanes = vector_lanes(sch, target) if vectorizable(sch) else 1
        for block in blocks:
            if reduce_count(sch, block):
                self._reduce(sch, block, layouts[reductions.index(block)], lanes)
            else:
                self._spread(sch, block, lanes)
        return True

    def _reduce(self, sch, block, layout, lanes):
        """One reduction as [outer kept x tiles of columns (parallel), reduced, columns (vector)],
        or, with too few such tasks, in chunks of rows (`_chunks`)."""
        loops = sch.get_loops(block)
        n_kept = layout.n_outer + layout.n_inner
        outer = fuse(sch, loops[:layout.n_outer]) if layout.n_outer else None
        column = fuse(sch, loops[layout.n_outer:n_kept])
        reduced = fuse(sch, loops[n_kept:])
        width, count = get_extent(sch, column), get_extent(sch, reduced)
        rows = get_extent(sch, outer) if outer is not None else 1
        rows = rows if isinstance(rows, int) else SYMBOLIC
        tile = self._tile(width, rows, lanes)
        tiles = -(-width // tile) if isinstance(width, int) else SYMBOLIC // tile
        work = static_product(sch, sch.get_loops(block))
        threads = work is None or work > MIN_PARALLEL_REDUCTION
        tasks = rows * tiles
        steps = count if isinstance(count, int) else SYMBOLIC
        parts = 1
        if threads and tasks < self.tasks and steps >= 2 * self.min_rows:
            parts = min(self.tasks // tasks, steps // self.min_rows)
        if parts > 1:
            self._chunks(sch, block, outer is not None, parts, tile, lanes)
            return
        tiled, inner = sch.split(column, [None, tile])
        spread = [loop for loop in (outer, tiled) if loop is not None]
        sch.reorder(*spread, reduced, inner)
        self._vectorize(sch, inner, lanes)
        if threads:
            sch.parallel(fuse(sch, spread))
        sch.decompose_reduction(block, reduced)

    def _tile(self, width, rows, lanes) -> int:
        """Columns per task: the row up to `max_row`, halved while there are fewer than `tasks`
        tasks and the halves stay at least `min_tile` whole vectors, rather than cutting the rows
        into chunks that need a fold. (One Zen 3 thread summed (16, 197, 768) over the middle axis
        as fast in tiles of 8 vectors as of 16, and 8 left no fold to 16 AVX-512 cores.)"""
        if not isinstance(width, int):
            return self.max_row
        tile = width if width <= self.max_row else self.max_row
        while rows * -(-width // tile) < self.tasks and tile % (2 * lanes) == 0 and tile // 2 >= self.min_tile * lanes \
                and width % (tile // 2) == 0:
            tile //= 2
        return tile

    def _chunks(self, sch, block, has_outer, parts, tile, lanes):
        """Each task sums a chunk of the rows of a tile of columns into a row of partial results
        (rfactor); a second loop folds them. (The columns are tiled after rfactor: a predicate on
        them before it would not reach the fold.)"""
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
        sch.parallel(fuse(sch, [chunk, *outer, tiled]))
        self._vectorize(sch, inner, lanes)
        sch.decompose_reduction(partial, step)
        *kept, chunk = sch.get_loops(block)  # the fold: [outer, columns, chunks]
        row = fuse(sch, kept)
        size, width = static_product(sch, [row, chunk]), get_extent(sch, row)
        if (size is None or size >= MIN_PARALLEL_ELEMENTWISE) and (not isinstance(width, int) or width > tile):
            tiled, row = sch.split(row, [None, tile])  # a wide row: tiles of it in parallel
            sch.reorder(tiled, chunk, row)
            sch.parallel(tiled)
        else:
            sch.reorder(chunk, row)
        self._vectorize(sch, row, lanes)
        sch.decompose_reduction(block, chunk)

    @staticmethod
    def _vectorize(sch, loop, lanes):
        """Whole vectors of `lanes` columns where they tile the loop; else LLVM's loop vectoriser
        takes the contiguous loop as it is."""
        if pow2_divisor(get_extent(sch, loop), lanes) == lanes > 1:
            sch.vectorize(sch.split(loop, [None, lanes])[1])

    def _spread(self, sch, block, lanes):
        """An element-wise block (a mean's division, `x - x.mean(0)`): a loop of its own, the
        innermost `lanes` vectorised where contiguous, the rest in parallel where large."""
        loops = sch.get_loops(block)
        if not loops:
            return
        total = static_product(sch, loops)
        vector = contiguous_lanes(sch, loops[-1], lanes) if lanes > 1 else 1
        fused = fuse(sch, loops)
        if vector > 1 and pow2_divisor(total, vector) == vector:
            fused, lane = sch.split(fused, [None, vector])
            sch.vectorize(lane)
        if total is None or total >= MIN_PARALLEL_ELEMENTWISE:
            sch.parallel(fused)
