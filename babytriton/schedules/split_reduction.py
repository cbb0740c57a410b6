"""GPU rule SplitReduction: a reduction to few results (`x.sum()`, a few long rows) cut into chunks
that blocks reduce in parallel, then a second kernel that folds the partial results."""
from __future__ import annotations

from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import contiguous_reduction, fuse, normalized, reduce_count, static_product
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
    cross-thread reduction in that kernel), and the fold reduces their partial results."""

    def __init__(self, threads: int = 256, parts: int = 1024, max_rows: int = 32, min_chunk: int = 4096,
                 strided_threads: int = 1 << 16):
        self.threads, self.parts, self.max_rows, self.min_chunk = threads, parts, max_rows, min_chunk
        self.strided_threads = strided_threads

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        red, epilogues = blocks[0], blocks[1:]
        if not reduce_count(sch, red) or any(reduce_count(sch, b) for b in epilogues):
            return None
        if len(sch.get(red).writes) != 1:  # online softmax's (sum, max) pairs: GeneralReduction
            return decline("two results per reduction (an online softmax's sum and max)")
        loops = sch.get_loops(red)
        n_rows = len(loops) - reduce_count(sch, red)
        rows = static_product(sch, loops[:n_rows])
        if rows is None:
            return decline("a symbolic number of rows")
        if rows > self.max_rows:
            return decline(f"{rows} rows: more than {self.max_rows}")
        if not contiguous_reduction(sch, red):
            return decline("reduces across rows (a column sum): not contiguous")
        for b in epilogues:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
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
            # a symbolic size, or one no equal chunks divide: every thread of a fixed grid sums a
            # strided share (element i goes to thread i mod the grid's size: coalesced) into a partial
            # result of its own, so no cross-thread reduction runs under the ragged end's predicate
            grid_size = self.strided_threads if not isinstance(extent, int) else \
                min(self.strided_threads, 1 << ((extent // 8).bit_length() - 1))
            _, across = sch.split(k, [None, grid_size])
            rf = sch.rfactor(across, factor_axis=0)
            *row_loops, serial, lanes = sch.get_loops(rf)
            sch.reorder(lanes, serial)
            grid, lane = sch.split(lanes, [None, self.threads])
            if row_loops:
                sch.reorder(grid, lane, *row_loops)
            sch.bind(grid, "blockIdx.x")
            sch.bind(lane, "threadIdx.x")
            # the partial accumulates in a register, set before the loop (a thread with no element
            # in range still writes the reduction's identity), and is stored once
            partial = sch.cache_write(rf, 0, "local")
            sch.reverse_compute_at(partial, sch.get_loops(rf)[-2])
            sch.decompose_reduction(rf, sch.get_loops(rf)[-1])
        *spatial, reduced = sch.get_loops(red)  # the fold of the partial results, or the whole reduction
        if not spatial:
            spatial = [sch.add_unit_loop(red)]
        row = fuse(sch, spatial)
        _, lane = sch.split(reduced, [None, self.threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        if epilogues:
            self._epilogues(sch, red, row, epilogues, rows)
        return sch

    def _epilogues(self, sch, red, row, epilogues, rows: int) -> None:
        """The element-wise work after the fold. A few values a result (a norm's sqrt) run in the fold's
        blocks, spread over their threads, reading the folded value from a register; more (`x / x.norm()`)
        get a grid of their own, since one block a result would leave the GPU idle."""
        total = static_product(sch, sch.get_loops(epilogues[-1]))
        if total is not None and total <= rows * self.threads:
            sch.set_scope(red, 0, "local")  # every thread holds the folded value
            for epilogue in reversed(epilogues):
                sch.reverse_compute_at(epilogue, row, preserve_unit_loops=True)
                inner = sch.get_loops(epilogue)[1:]
                if inner:
                    _, lane = sch.split(fuse(sch, inner), [None, self.threads])
                    sch.bind(lane, "threadIdx.x")
            return
        for epilogue in epilogues:
            grid, lane = sch.split(fuse(sch, sch.get_loops(epilogue)), [None, self.threads])
            sch.bind(grid, "blockIdx.x")
            sch.bind(lane, "threadIdx.x")

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
