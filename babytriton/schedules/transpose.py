"""GPU rule Tiled: an injective kernel that reads an input across that input's contiguous axis (`a + b.T`,
`x.permute(0, 2, 1) * y`, `x.transpose(1, 2).contiguous()`) goes through square tiles in shared memory,
so that the global reads and the writes are both coalesced."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.sym.pattern import detect_linear_equation

from .analysis import find_all, fuse, is_int, normalized, uses
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import across_reads
from .reasons import decline

# A tile's side, by the bytes of the element staged: a row of a tile is 128 bytes (a whole cache line)
# for elements of up to 4 bytes, and at least 32 elements (a warp) for wider ones.
_TILE = {1: 128, 2: 64, 4: 32, 8: 32}
MIN_ACROSS = 8  # both axes of the tile at least this long: a narrower one is read well enough in place


class Tiled(GPUScheduleRule):
    """Injective kernels whose output's innermost loop indexes an input along an outer axis while
    another loop indexes that input's innermost axis: the two loops are tiled (T x T, `_TILE`); a
    block of threads reads each such input's tile into shared memory along the input's contiguous
    axis, then computes the output's tile along the output's contiguous axis, in vectors of 16 bytes
    where the output's row allows. The tile's rows are padded by one 4-byte bank, so reading a column
    of it touches 32 banks. Which loop pairs with the innermost one is read from the indices of every
    read (the loop that steps an input's last index by one), for any rank and permutation."""

    def __init__(self, threads: int = 256, vector_bytes: int = 16):
        self.threads, self.vector_bytes = threads, vector_bytes

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        infos = inline(sch, infos, GPU_CALL_DEPTH)
        if len(infos) != 1 or not infos[0].is_injective():
            return None
        block = infos[0].block_rv
        loops = sch.get_loops(block)
        realize = sch.get(loops[-1]).body if loops else None
        if len(loops) < 2 or not isinstance(realize, tvm.s_tir.SBlockRealize) or not all(
                value.same_as(sch.get(loop).loop_var) for value, loop in zip(realize.iter_values, loops)):
            return None
        ivs = [iv.var for iv in realize.block.iter_vars]
        across = across_reads(realize.block, ivs)
        if not across:
            return None  # nothing read across its contiguous axis: Elementwise's
        k = max(set(across.values()), key=list(across.values()).count)  # the loop most such reads pair with
        staged = sorted(i for i, axis in across.items() if axis == k)
        extents = [sch.get(loop).extent for loop in (loops[k], loops[-1])]
        if not all(isinstance(e, tirx.IntImm) for e in extents):
            # a tile at a symbolic edge would need shared memory of a symbolic size
            return decline("a transposed read along a symbolic axis: read in place")
        tile = _TILE.get(max(tvm.DataType(realize.block.reads[i].source.dtype).bits // 8 for i in staged), 32)
        merged = _run_before(sch, loops, k, staged, realize.block, ivs, tile) if int(extents[0]) < MIN_ACROSS else None
        n = int(extents[1])
        if n < MIN_ACROSS and self.threads % n == 0 and int(extents[0]) >= MIN_ACROSS and k == len(loops) - 2:
            # the output's short rows (`x.permute(0, 2, 1)` of a [n, 4, m] tensor) follow loop k's
            # rows: one run of the output, tiled whole with a long side along k (a row length that
            # divides the block: its threads split evenly over the rows)
            return self._schedule(sch, block, loops, k, staged, realize.block, short_rows=int(extents[1]))
        if int(extents[1]) < MIN_ACROSS or (int(extents[0]) < MIN_ACROSS and merged is None):
            return decline(f"a transposed read whose tile side is under {MIN_ACROSS}: read in place")
        return self._schedule(sch, block, loops, k, staged, realize.block, merged)

    def _schedule(self, sch, block, loops, k, staged, stmt, merged=None, short_rows=0):
        """Tile loops k (with loop `merged` before it, when k is short) and the innermost (whole where
        the output's rows are `short_rows` long, k then the loop before it), stage the `staged` reads
        in shared memory, bind threads."""
        widest = max(tvm.DataType(stmt.reads[i].source.dtype).bits // 8 for i in staged)
        tile = _TILE.get(widest, 32)
        vector, contiguous = _output_lanes(stmt, sch.get(loops[-1]).extent, self.vector_bytes, staged)
        vector = min(vector, tile * tile // self.threads)  # every thread a vector of the tile: no idle rows
        others = [loop for i, loop in enumerate(loops) if i not in (k, len(loops) - 1, merged)]
        if short_rows:
            # as many elements as a square tile: the staged rows (`short_rows` of them) are each
            # tile * tile / short_rows long, the output's tile one contiguous run
            side = min(tile * tile // short_rows, -(-int(sch.get(loops[k]).extent) // self.threads) * self.threads)
            ko, ki = sch.split(loops[k], [None, max(self.threads, side // 32 * 32)])
            sch.reorder(*others, ko, ki, loops[-1])
            grid, ni = fuse(sch, [*others, ko]), loops[-1]
            tile = short_rows
        else:
            grid, ki, ni = self._square(sch, loops, k, others, merged, tile)
        sch.bind(grid, "blockIdx.x")
        # a warp's threads along the output's row (whole vectors), the rest of the block down the tile
        across = tile // vector
        nt, lanes = sch.split(ni, [across, vector])
        steps, kt = sch.split(ki, [None, self.threads // across])
        sch.reorder(kt, nt, steps, lanes)
        sch.bind(sch.fuse(kt, nt), "threadIdx.x")
        # a short-rows tile is read by a warp along its rows (consecutive banks): no padding
        self._stage(sch, block, staged, grid, merged, padded=not short_rows)
        if vector > 1:
            _vectors_through_registers(sch, block, steps, lanes, contiguous)
        return sch

    @staticmethod
    def _square(sch, loops, k, others, merged, tile):
        """Split loop k (fused with `merged` when short) and the innermost into tile x tile squares:
        the grid's loop, then the tile's loops along k and along the output's row."""
        no, ni = sch.split(loops[-1], [None, tile])
        if merged is None:
            ko, ki = sch.split(loops[k], [None, tile])
            sch.reorder(*others, ko, no, ki, ni)
        else:  # the short loop k whole, under tile / k's extent of the loop before: `tile` source elements in a run
            ko, ji = sch.split(loops[merged], [None, tile // int(sch.get(loops[k]).extent)])
            sch.reorder(*others, ko, no, ji, loops[k], ni)
            ki = sch.fuse(ji, loops[k])
        return fuse(sch, [*others, ko, no]), ki, ni

    def _stage(self, sch, block, staged, grid, merged, padded=True):
        """Each staged read copied into shared memory under the grid's loop, along the source's rows;
        `padded`: rows a bank apart, for a tile whose columns are read by a warp."""
        for index in reversed(staged):
            stmt = sch.get(block)
            offset = _offset(stmt.reads[index].region[-1].min, [iv.var for iv in stmt.iter_vars])
            cache = sch.cache_read(block, index, "shared")
            sch.compute_at(cache, grid, preserve_unit_loops=True)
            source = sch.get(cache).reads[0].source
            size = tvm.DataType(source.dtype).bits // 8
            # 4-byte words (two halves, four bytes) per load: what a padded row keeps aligned; an
            # unpadded one takes whole 16-byte vectors
            lanes = max(1, (4 if padded else self.vector_bytes) // size)
            while lanes > 1 and not (_divides(lanes, source.ty.shape[-1]) and _aligned(offset, lanes)):
                lanes //= 2  # a row width or an offset (a slice's start) that whole vectors do not tile
            words = lanes if str(source.dtype) != "bool" else 1  # CUDA has no vector of bools
            copy = fuse(sch, sch.get_loops(cache)[1:])
            _, cache_threads, cache_lanes = sch.split(copy, [None, self.threads, words])
            sch.bind(cache_threads, "threadIdx.x")
            if words > 1:
                sch.vectorize(cache_lanes)
            rank = len(sch.get(cache).writes[0].region)
            # rows of a tile one 4-byte bank apart: a column read by a warp hits 32 banks, not one
            # (a merged tile's row spans the source's last two axes)
            row = rank - 2 if merged is None else rank - 3
            if row >= 0 and padded:
                sch.storage_align(cache, 0, row, 128 // size, max(1, 4 // size))


def _run_before(sch, loops, k, staged, stmt, ivs, tile):
    """The loop before a short loop k (a transposed read whose last axis is shorter than MIN_ACROSS,
    `y.permute(1, 2, 0)` of a [n, m, 2] tensor) where every staged read indexes its last two axes by
    those two loops, whole: the two axes are one contiguous run of the source, tiled together. None
    where there is no such loop."""
    j, short = k - 1, sch.get(loops[k]).extent
    if j < 0 or tile % int(short) or not isinstance(sch.get(loops[j]).extent, tirx.IntImm) or int(
            sch.get(loops[j]).extent) * int(short) < MIN_ACROSS:
        return None
    for i in staged:
        region = stmt.reads[i].region
        shape = stmt.reads[i].source.ty.shape
        if len(region) < 2 or not is_int(shape[-1], int(short)) or not (
                region[-2].min.same_as(ivs[j]) and region[-1].min.same_as(ivs[k])):
            return None
    return j


def _vectors_through_registers(sch, block, steps, lanes, contiguous) -> None:
    """Each thread's vector of the output, and of each input read along it, moves between global
    memory and registers as one vector; the lanes are computed one by one in between (a lane of the
    shared tile is a column apart from the next: as a vector, eight halves would be a gather CUDA
    has no type for)."""
    for index in reversed(range(len(sch.get(block).reads))):
        if any(sch.get(block).reads[index].source.same_as(b) for b in contiguous):
            cache = sch.cache_read(block, index, "local")
            sch.compute_at(cache, steps, preserve_unit_loops=True)
            _vectorize_below(sch, cache, steps)
    for index in reversed(range(len(sch.get(block).writes))):
        cache = sch.cache_write(block, index, "local")
        sch.reverse_compute_at(cache, steps, preserve_unit_loops=True)
        _vectorize_below(sch, cache, steps)
    sch.unroll(lanes)


def _vectorize_below(sch, block, loop) -> None:
    """Vectorise the loops of `block` below `loop` (a register copy's loops over one vector)."""
    loops = sch.get_loops(block)
    below = [i for i, other in enumerate(loops) if sch.get(other).same_as(sch.get(loop))][0]
    sch.vectorize(fuse(sch, loops[below + 1:]))


def _offset(index, ivs):
    """The constant part of a staged read's last index (`ivs[k] + 3` of a slice: 3); None where the
    index is not linear in the iteration variables."""
    coeffs = detect_linear_equation(index, ivs)
    return coeffs[-1] if len(coeffs) == len(ivs) + 1 else None


def _aligned(offset, lanes: int) -> bool:
    """Whether an offset along a row is a multiple of `lanes` (a tile's rows then start at whole
    vectors: the tile's start along the row is a multiple of its side, each row of the row width)."""
    if offset is None:
        return False
    known = tvm.sym.Analyzer().modular_set(offset)
    return int(known.coeff) % lanes == 0 and int(known.base) % lanes == 0


def _divides(lanes: int, extent) -> bool:
    return isinstance(extent, tirx.IntImm) and int(extent) % lanes == 0


def _output_lanes(stmt, extent, vector_bytes: int, staged) -> tuple[int, list]:
    """Lanes of the output's vectors along the innermost loop (of `extent`): 16 bytes of the widest
    buffer read or written along it, fewer where the row's width or an offset is not a multiple, 1
    where a read (not staged) goes across the innermost axis some other way; and the buffers read
    along it, which then move as vectors."""
    inner = stmt.iter_vars[-1].var
    staged_buffers = [stmt.reads[i].source for i in staged]
    multiples, widest, contiguous = [], 1, []
    for load in find_all(stmt.body, tvm.ir.TensorLoad):
        if any(load.source.same_as(b) for b in staged_buffers) or not any(uses(i, inner) for i in load.indices):
            continue
        widest = max(widest, tvm.DataType(load.source.dtype).bits // 8)
        if not _contiguous_along(load.indices, load.source.ty.shape, inner, multiples):
            return 1, []
        if str(load.source.dtype) != "bool":  # a bool is read in place: CUDA has no vector of bools
            contiguous.append(load.source)
    for store in find_all(stmt.body, tirx.BufferStore):
        widest = max(widest, tvm.DataType(store.buffer.dtype).bits // 8)
        if not _contiguous_along(store.indices, store.buffer.ty.shape, inner, multiples) or str(
                store.buffer.dtype) == "bool":
            return 1, []
    if not isinstance(extent, tirx.IntImm):
        return 1, []
    lanes = max(vector_bytes // widest, 1)
    while lanes > 1 and any(m % lanes for m in multiples + [int(extent)]):
        lanes //= 2
    return lanes, contiguous


def _contiguous_along(indices, shape, var, multiples: list) -> bool:
    """Whether an access steps its last index by one along `var` and no other index with it; adds
    what a vector's lane count must divide (the row's width, the offset) to `multiples`."""
    *outer, last = indices
    coeffs = detect_linear_equation(last, [var])
    if any(uses(i, var) for i in outer) or len(coeffs) != 2 or not is_int(coeffs[0], 1) or not isinstance(
            shape[-1], tirx.IntImm):
        return False
    offset = tvm.sym.Analyzer().modular_set(coeffs[1])
    multiples += [int(shape[-1]), int(offset.coeff), int(offset.base)]
    return True
