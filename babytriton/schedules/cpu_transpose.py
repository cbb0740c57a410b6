"""CPU rule CPUTiled: an injective kernel that reads an input across that input's contiguous axis
(`a + b.T`, a permute) in cache-sized tiles, so that the input's lines are reused from L1 while the
output streams out in vectors."""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import fuse, static_product
from .cpu_rule import MIN_PARALLEL_ELEMENTWISE, CPURule, pow2_divisor, vector_lanes, vectorizable
from .inlining import inline
from .lanes import across_reads
from .reasons import decline

# The tile's rows along the output's row (a multiple of any vector) and down the transposed input's
# row. One tile of the transposed input is TILE_ROWS of its lines being read a column at a time:
# 64 lines of 64 bytes, 4 KB of L1, each line used for 16 float32 (or 32 half) columns in turn before
# it is left; the output's tile, 64 rows of 64 elements, streams out a row at a time.
TILE_ACROSS = 64
TILE_ROWS = 64
MIN_SIDE = 8  # a narrower tile side is read well enough untiled (CPUElementwise)


class CPUTiled(CPURule):
    """Injective kernels whose output's innermost loop indexes an input along an outer axis while
    another loop indexes that input's innermost axis (found from the reads' indices: `across_reads`):
    both loops are tiled (TILE_ROWS x TILE_ACROSS), tiles run in parallel, and inside a tile the
    output's rows are vectorised along its contiguous axis. Untiled, each output row read a whole
    column of the input, one cache line per element, and the lines were gone before the next row
    came back for their neighbours (`a + b.T`: 0.10x torch.compile on 16 cores)."""

    def schedule(self, sch, infos, target):
        if not all(info.is_injective() for info in infos):
            return False
        infos = inline(sch, infos)
        if len(infos) != 1:
            return False
        block = infos[0].block_rv
        loops = sch.get_loops(block)
        realize = sch.get(loops[-1]).body if loops else None
        if len(loops) < 2 or not isinstance(realize, s_tir.SBlockRealize) or not all(
                value.same_as(sch.get(loop).loop_var) for value, loop in zip(realize.iter_values, loops)):
            return False
        across = across_reads(realize.block, [iv.var for iv in realize.block.iter_vars])
        if not across:
            return False
        k = max(set(across.values()), key=list(across.values()).count)
        rows, width = get_extent(sch, loops[k]), get_extent(sch, loops[-1])
        if not isinstance(rows, int) or not isinstance(width, int) or min(rows, width) < MIN_SIDE:
            return decline(f"a transposed read along a symbolic axis or one under {MIN_SIDE}: not tiled")
        work = static_product(sch, loops)
        lanes = pow2_divisor(width, vector_lanes(sch, target) if vectorizable(sch) else 1)
        ko, ki = sch.split(loops[k], [None, min(TILE_ROWS, rows)])
        no, ni = sch.split(loops[-1], [None, min(TILE_ACROSS, width)])
        others = [loop for i, loop in enumerate(loops) if i not in (k, len(loops) - 1)]
        sch.reorder(*others, ko, no, ki, ni)
        tile = fuse(sch, [*others, ko, no])
        if work is None or work >= MIN_PARALLEL_ELEMENTWISE:  # less stays on the calling thread
            sch.parallel(tile)
        for index in sorted((i for i, axis in across.items() if axis == k), reverse=True):
            _transposed_copy(sch, block, index, tile, lanes)
        if lanes > 1:
            sch.vectorize(sch.split(ni, [None, lanes])[1])
        return True


def _transposed_copy(sch, block, index, tile, lanes: int) -> None:
    """Copy the tile's part of the block's read `index` into a buffer laid out as the output (on the
    stack), reading the input along its rows: the block then reads the copy in vectors."""
    rank = len(sch.get(block).iter_vars)
    cache = sch.reindex_cache_read(block, index, "local", tirx.IndexMap.from_func(lambda *ivs: list(ivs), ndim=rank))
    sch.compute_at(cache, tile, preserve_unit_loops=True)
    loops = sch.get_loops(cache)
    below = [i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(tile))][0]
    *_, rows, across = loops[below + 1:]
    sch.reorder(across, rows)  # along the input's contiguous axis: its lines read once, in order
    if lanes > 1 and isinstance(sch.get(rows).extent, tirx.IntImm) and int(sch.get(rows).extent) % lanes == 0:
        sch.vectorize(sch.split(rows, [None, lanes])[1])
