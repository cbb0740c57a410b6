"""GPU rule SplitReduction: reductions to few results (`x.sum()`, a few long rows, the softmax or norm of
one) cut into chunks that blocks reduce in parallel, then a second kernel that folds the partial
results; several reductions over the same rows one after another, each in its two launches."""
from __future__ import annotations

from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import contiguous_reduction, fuse, in_registers, normalized, reduce_count, static_product
from .inlining import GPU_CALL_DEPTH, inline
from .reasons import decline


class SplitReduction(GPUScheduleRule):
    """A reduction to few results over contiguous elements (`x.sum()`, `x.mean()`, a row sum of 4 long
    rows), with any element-wise epilogue: Dlight gives each result one block, or one thread, and leaves
    the GPU idle. Here the reduction is cut into equal chunks, up to `parts` per result (rfactor); a
    block sums each chunk (coalesced loads, then a cross-thread reduction) into a buffer of partial
    results, and a second kernel folds them with one block per result. The chunks must divide the size
    exactly: TVM lowers no cross-thread reduction under a predicate that mixes the block index in (a
    ragged last chunk), it would leave racing threads. A symbolic or prime size is instead shared out
    element by element over a fixed grid of threads, each summing into a register of its own (no
    cross-thread reduction in that kernel), and the fold reduces their partial results.

    A row kernel of several reductions (a softmax's max and sum, a norm's mean and variance) over few
    long rows is split the same way, reduction after reduction, each reading the last one's folded
    results from memory, with the element-wise work between them a grid of its own: one block a row
    (the row rules) left a GPU of 132 SMs with 1 to 32 busy. Shorter rows (`_long`) stay with the row
    rules: one launch, each row read once."""

    def __init__(self, threads: int = 256, parts: int = 1024, max_rows: int = 32, min_chunk: int = 4096,
                 strided_threads: int = 1 << 16, max_long_rows: int = 128, long_row: int = 1 << 18,
                 few_rows: int = 8):
        self.threads, self.parts, self.max_rows, self.min_chunk = threads, parts, max_rows, min_chunk
        self.strided_threads, self.max_long_rows = strided_threads, max_long_rows
        self.long_row, self.few_rows = long_row, few_rows

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        if not reductions or blocks[0] not in reductions:
            return None
        rows = [self._rows(sch, red) for red in reductions]
        declined = next((r for r in rows if isinstance(r, str)), None)
        if declined is not None:
            return decline(declined)
        if len(reductions) > 1 and not self._long(sch, reductions[0], rows[0][1]):
            return None   # short rows: one block a row, all reductions in one launch (the row rules)
        for block in blocks[1:]:
            if not sch.get_loops(block):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(block)
        for red, (n_rows, _) in zip(reductions, rows):
            row = self._split(sch, red, n_rows)
        last = reductions[-1]
        between = [b for b in blocks if b not in reductions and blocks.index(b) < blocks.index(last)]
        self._grids(sch, between)
        after = blocks[blocks.index(last) + 1:]
        if after:
            self._epilogues(sch, last, row, after, rows[-1][1])
        return sch

    def _rows(self, sch, red):
        """`red`'s row loops and rows (static, at most `max_rows`), or why the rule declines it."""
        loops = sch.get_loops(red)
        n_rows = len(loops) - reduce_count(sch, red)
        rows = static_product(sch, loops[:n_rows])
        if rows is None:
            return "a symbolic number of rows"
        # long rows fill a GPU only when there are more than its SMs (132 on an H100/H200)
        long = self._long(sch, red, rows)
        if len(sch.get(red).writes) != 1 and not long:  # an argmax's or online softmax's pairs
            return "two results per reduction, over rows short enough for a block each"
        limit = self.max_long_rows if long else self.max_rows
        if rows > limit:
            return f"{rows} rows: more than {limit}"
        if not contiguous_reduction(sch, red):
            return "reduces across rows (a column sum): not contiguous"
        return n_rows, rows

    def _long(self, sch, red, rows: int) -> bool:
        """Whether `red`'s rows are long enough that cutting them over blocks, a launch per reduction
        and per fold, beats a block a row. On an H200 (benchmarks/probes/few_rows.py) a layer norm of
        8 rows of 2^18 took 49 us split and 87 a block a row, of 1 row of 2^20 36 and 179; of 32 rows
        of 2^17 (group norm) 52 and 31, of 128 rows of 32000 57 and 32: launches cost more than the
        idle SMs there. A symbolic length counts as long only for 8 rows or fewer."""
        extent = static_product(sch, sch.get_loops(red)[len(sch.get_loops(red)) - reduce_count(sch, red):])
        if extent is None:
            return rows <= self.few_rows
        return extent >= self.long_row or (rows <= self.few_rows and extent >= self.long_row // 4)

    def _split(self, sch, red, n_rows: int):
        """Cut `red` into chunks reduced by blocks in parallel (or a strided share a thread), then fold
        the partial results with one block a row; returns the fold's row loop."""
        k = fuse(sch, sch.get_loops(red)[n_rows:])
        extent = get_extent(sch, k)
        parts = self._parts(extent)
        if parts > 1:
            sch.split(k, [parts, None])
            rf = sch.rfactor(sch.get_loops(red)[-2], factor_axis=0)
            *spatial, inner = sch.get_loops(rf)
            _, lane = sch.split(inner, [None, self.threads])
            wide = [loop for loop in spatial if get_extent(sch, loop) != 1] or spatial[:1]
            sch.bind(fuse(sch, wide), "blockIdx.x")
            sch.bind(lane, "threadIdx.x")
        elif not isinstance(extent, int) or extent > 2 * self.min_chunk:
            self._strided(sch, k, extent, static_product(sch, sch.get_loops(red)[:n_rows]) or 1)
        *spatial, reduced = sch.get_loops(red)  # the fold of the partial results, or the whole reduction
        if not spatial:
            spatial = [sch.add_unit_loop(red)]
        row = fuse(sch, spatial)
        _, lane = sch.split(reduced, [None, self.threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        return row

    def _strided(self, sch, k, extent, rows: int) -> None:
        """A symbolic size, or one no equal chunks divide: every thread of a fixed grid (its share of
        `strided_threads` a row) sums a strided share of its row (element i goes to thread i mod the
        row's threads: coalesced) into a partial result of its own, so no cross-thread reduction runs
        under the ragged end's predicate."""
        per_row = self.strided_threads // rows
        if isinstance(extent, int):
            per_row = min(per_row, 1 << ((extent // 8).bit_length() - 1))
        per_row = max(self.threads, per_row // self.threads * self.threads)
        _, across = sch.split(k, [None, per_row])
        rf = sch.rfactor(across, factor_axis=0)
        *row_loops, serial, lanes = sch.get_loops(rf)
        grid, lane = sch.split(lanes, [None, self.threads])
        sch.reorder(grid, lane, serial)
        sch.bind(fuse(sch, row_loops + [grid]), "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        # the partials accumulate in registers, set before the loop (a thread with no element in
        # range still writes the reduction's identity), and are stored once; an argmax's (index,
        # value) and an online softmax's (sum, max) are two
        partials = [sch.cache_write(rf, i, "local") for i in range(len(sch.get(rf).writes))]
        for partial in partials:
            sch.reverse_compute_at(partial, sch.get_loops(rf)[-2])
        sch.decompose_reduction(rf, sch.get_loops(rf)[-1])

    def _grids(self, sch, blocks) -> None:
        """Element-wise blocks between two reductions, each a grid over its elements."""
        for block in blocks:
            grid, lane = sch.split(fuse(sch, sch.get_loops(block)), [None, self.threads])
            sch.bind(grid, "blockIdx.x")
            sch.bind(lane, "threadIdx.x")

    def _epilogues(self, sch, red, row, epilogues, rows: int) -> None:
        """The element-wise work after the fold. A few values a result (a norm's sqrt) run in the fold's
        blocks, spread over their threads, reading the folded value from a register; more (`x / x.norm()`)
        get a grid of their own, since one block a result would leave the GPU idle."""
        total = static_product(sch, sch.get_loops(epilogues[-1]))
        if total is not None and total <= rows * self.threads:
            in_registers(sch, red)   # every thread holds the folded values
            for epilogue in reversed(epilogues):
                sch.reverse_compute_at(epilogue, row, preserve_unit_loops=True)
                inner = sch.get_loops(epilogue)[1:]
                if inner:
                    _, lane = sch.split(fuse(sch, inner), [None, self.threads])
                    sch.bind(lane, "threadIdx.x")
            return
        self._grids(sch, epilogues)

    def _parts(self, extent) -> int:
        """The most chunks, up to `parts`, of at least `min_chunk` elements that divide `extent`; 1 where
        they are under half of what the size allows."""
        if not isinstance(extent, int):
            return 1
        wanted = min(self.parts, extent // self.min_chunk)
        for parts in range(wanted, 1, -1):
            if extent % parts == 0:
                # few chunks (a size with only small divisors, 2 x a prime) would leave the GPU idle:
                # the strided grid instead
                return parts if 2 * parts >= wanted else 1
        return 1
