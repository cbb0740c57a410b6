"""GPU rule RowKernel: a fused row kernel (softmax, a norm, cross-entropy) over rows of a static width,
one block per row reading whole vectors into registers; and the pass `own_thread_slices`, which
gives each thread only its slice of the values RowKernel keeps in registers."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import (block_value, find_all, fuse, is_buffer, is_int, kept_in_order, math_read_twice, normalized,
                       reduce_count, uses)
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import branched_buffers, contiguous_lanes, innermost_var, one_vector
from .reasons import decline
from .thread_slices import THREAD_AXIS


class RowKernel(GPUScheduleRule):
    """A fused row kernel (softmax, a norm, cross-entropy): reductions over the innermost, contiguous
    axis of static width, then an element-wise block over the same rows (or one value per row). One
    block of up to `threads` per row; each thread reads `vector_bytes` per step with one vector load
    into registers, accumulates in registers and the block reduces across threads (warp shuffles);
    the per-row results live in shared memory, and the last block stores whole vectors too. An exp
    that two passes read (a softmax's) is computed once, into each thread's registers. Dlight's
    GeneralReduction does the same with one scalar (2 bytes for halves) per load. Anything else
    (a symbolic width, one that no whole vectors tile, a strided row, a branch on the column) is
    left to Dlight's Reduction and GeneralReduction."""

    # 128 threads: on the H100 a 4096-wide float16 softmax took 36.9 us with 128, 41.5 with 256
    # (more rows in flight per SM); float32 rows took the same with either
    def __init__(self, threads: int = 128, min_threads: int = 32, vector_bytes: int = 16, unroll: int = 64,
                 kept_elements: int = 32):
        self.threads, self.min_threads, self.vector_bytes, self.unroll = threads, min_threads, vector_bytes, unroll
        self.kept_elements = kept_elements  # the most elements a thread keeps of an exp two passes read

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        original = list(infos)
        kept = self._kept(sch, func, infos)
        infos = inline(sch, infos, GPU_CALL_DEPTH, keep=[info.block_rv for info in kept])
        if len(infos) < 2 or not infos[-1].is_injective():
            return None
        rows = self._rows(sch, func, infos)
        if rows is None:
            return None
        n_rows, width, whole_row, vector, threads, last_loops = rows
        *reductions, last = [info.block_rv for info in infos]
        column = innermost_var(sch, last_loops[-1]) if whole_row else None
        # a unit loop for the thread index apart from the rows' (a split of the row loop would put the
        # thread index into the row's, and the reductions' regions would then span a row per thread)
        rest = last_loops[n_rows:] or [sch.add_unit_loop(last)]
        # the element-wise block first: its row loop is where the reductions then go
        row = fuse(sch, last_loops[:n_rows])
        if whole_row:
            step, lane, lanes = sch.split(rest[0], [None, threads, vector])
            sch.reorder(lane, step, lanes)
        else:
            _, lane = sch.split(fuse(sch, rest), [None, threads])  # thread 0 writes the row's value
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        vectors = []  # (block, the row's vars, step): each block's per-step vectors, after `kept`
        if whole_row:
            vectors.append((last, [column], step))
            sch.unroll(lanes)
            self._annotate_unroll(sch, step)
        for block in reversed(kept_in_order(original[:-1], infos[:-1], kept)):
            if any(block is k.block_rv for k in kept):
                vectors.append((block, [sch.get(block).iter_vars[-1].var], self._in_registers(sch, block, row, threads,
                                                                                               vector)))
                continue
            step = self._shared_reduction(sch, block, row, width, threads, vector)
            if step is None:
                return None
            vectors.append((block, [iv.var for iv in sch.get(block).iter_vars
                                    if iv.iter_type == tirx.IterVar.CommReduce], step))
        for block, along, step in vectors:
            _row_vectors(sch, block, along, step)
        return sch

    def _kept(self, sch, func, infos) -> list:
        """The blocks computed once into registers rather than inlined: math two passes read."""
        loops = sch.get_loops(infos[0].block_rv)
        if not loops:
            return []  # a 0-d kernel has no row to keep anything of
        width = get_extent(sch, loops[-1])
        kept = [info for info in infos[:-1] if math_read_twice(sch, info.block_rv) or (
            _divides_read_twice(sch, info.block_rv) and _along_row(sch, info.block_rv, width))]
        # a softmax's exp(x - max), read by the row sum and by the division, is computed once per element
        # into registers instead of inlined into both: float16 rows of 4096 on the H100, 33.0 -> 28.3 us
        # (0.77 -> 0.90 of a copy), bfloat16 33.0 -> 26.7 us; only where a thread's share fits registers
        if kept:
            shape = self._shape(func, width) if isinstance(width, int) else None
            kept = kept if shape is not None and width // shape[1] <= self.kept_elements else []
        return kept

    def _rows(self, sch, func, infos) -> tuple | None:
        """Whether the blocks are a row kernel this rule takes, and its shape: (the number of row axes,
        the row width, whether the last block writes whole rows, the vector and thread counts, the
        last block's loops); None (with the reason, mostly) where not."""
        *reductions, last = [info.block_rv for info in infos]
        dom = infos[0].dom_kind()
        params = [p for p in func.params if is_buffer(p)]
        if any("R" in info.dom_kind() for info in infos) and any(
                region.source.same_as(p) for block in reductions for region in sch.get(block).writes for p in params):
            # (a row statistic a training forward saves, a residual sum, a quantisation's scale)
            return decline("results besides the last block's: InnerReduction writes them from registers")
        if "R" not in dom:
            return None  # no reduction first: another kind of kernel
        if len(dom) < 2 or dom[:-1] != "S" * (len(dom) - 1) or dom[-1] != "R" or any(
                info.dom_kind() != dom for info in infos[:-1]):  # one reduced axis, innermost, in every reduction
            return decline("not one reduced axis, the same in every reduction")
        n_rows = len(dom) - 1
        rows = [sch.get(loop).extent for loop in sch.get_loops(reductions[0])[:n_rows]]
        width = get_extent(sch, sch.get_loops(reductions[0])[-1])
        if not isinstance(width, int):
            return decline("a symbolic row width")
        for block in reductions:
            extents = [sch.get(loop).extent for loop in sch.get_loops(block)]
            if not _same_extents(extents[:-1], rows) or get_extent(sch, sch.get_loops(block)[-1]) != width:
                return decline("reductions over different rows")
        last_loops = sch.get_loops(last)
        extents = [sch.get(loop).extent for loop in last_loops]
        if not _same_extents(extents[:n_rows], rows):
            return decline("the element-wise block's rows are not the reductions'")
        tail = [get_extent(sch, loop) for loop in last_loops[n_rows:]]
        whole_row = tail == [width]  # else one value per row (cross-entropy's loss), or nothing fits
        if not whole_row and any(t != 1 for t in tail):
            return decline("the element-wise block's rows are not the reductions' width")
        shape = self._shape(func, width)
        if shape is None:
            return decline(f"row width {width}: no vectors x threads tile it")
        vector, threads = shape
        if threads < self.threads and any(len(sch.get(block).writes) > 1 for block in reductions):
            # an online softmax's (sum, max) pairs over fewer threads than a full block: on an H200
            # (benchmarks/probes/few_rows.py rows) a softmax over rows of 32000 took 70 us here (64
            # threads a row) and 29 in InnerReduction (1024), over 1142 such rows 187 and 165
            return decline("a reduction of (sum, max) pairs over a narrow block: InnerReduction")
        if whole_row and contiguous_lanes(sch, last_loops[-1], vector) != vector:
            return decline("rows not contiguous in the innermost axis")
        return n_rows, width, whole_row, vector, threads, last_loops

    def _shared_reduction(self, sch, block, row, width: int, threads: int, vector: int):
        """A reduction computed at the row, into shared memory (every thread of the row reads its
        result), each thread reducing whole vectors; its step loop, or None where its row is not
        the element-wise block's or is read in no whole vectors."""
        for index in range(len(sch.get(block).writes)):
            sch.set_scope(block, index, "shared")  # every thread of the row reads the result
        sch.compute_at(block, row, preserve_unit_loops=True)
        loops = sch.get_loops(block)[1:]
        if any(get_extent(sch, loop) != 1 for loop in loops[:-1]) or get_extent(sch, loops[-1]) != width:
            return decline("a reduction's rows are not the element-wise block's rows")
        reduced = loops[-1]
        if contiguous_lanes(sch, reduced, vector) != vector:
            return decline("a reduction reads its row in no whole contiguous vectors")
        step, lane, lanes = sch.split(reduced, [None, threads, vector])
        sch.reorder(lane, step, lanes)
        sch.bind(lane, "threadIdx.x")
        sch.unroll(lanes)
        self._annotate_unroll(sch, step)
        return step

    def _in_registers(self, sch, block, row, threads: int, vector: int):
        """Compute a kept block (an exp that two passes read) once per element, into registers: each
        thread its own elements of the row, laid out as (step, thread, lane) like the passes that read
        them, so that `own_thread_slices` can give each thread only its slice. Returns its step loop."""
        sch.set_scope(block, 0, "local")
        sch.compute_at(block, row, preserve_unit_loops=True)
        step, lane, lanes = sch.split(sch.get_loops(block)[-1], [None, threads, vector])
        sch.reorder(lane, step, lanes)
        sch.bind(lane, "threadIdx.x")
        sch.unroll(step)
        sch.unroll(lanes)
        tile = threads * vector
        sch.transform_layout(block, ("write", 0), lambda *i: (*i[:-1], i[-1] // tile, i[-1] // vector % threads,
                                                               i[-1] % vector))
        sch.annotate(block, THREAD_AXIS, len(sch.get(block).writes[0].source.ty.shape) - 2)
        return step

    def _shape(self, func, width: int):
        """(lanes, threads): lanes of `vector_bytes` of the widest buffer that holds rows of this width,
        and the most threads (a power of two, `min_threads` to `threads`) whose vectors tile a row
        exactly. Fewer lanes where that gives 64 threads or more: a block of 32 threads leaves half of
        an SM idle (32 blocks at most per SM). None when no shape tiles the row."""
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params
                      if is_buffer(p) and len(p.ty.shape) and is_int(p.ty.shape[-1], width)), default=4)
        lanes = max(self.vector_bytes // max(widest, 1), 1)
        shapes = [(v, self._threads(width, v)) for v in (lanes, lanes // 2) if v >= 1 and v * widest >= 4]
        shapes = [(v, t) for v, t in shapes if t is not None]
        return next((shape for shape in shapes if shape[1] >= 64), shapes[0] if shapes else None)

    def _threads(self, width: int, vector: int) -> int | None:
        """The most threads (a power of two, `min_threads` to `threads`) whose vectors tile a row."""
        threads = self.threads
        while threads >= self.min_threads:
            if width % (threads * vector) == 0:
                return threads
            threads //= 2
        return None

    def _annotate_unroll(self, sch, step) -> None:
        sch.annotate(step, ann_key="pragma_auto_unroll_max_step", ann_val=self.unroll)
        sch.annotate(step, ann_key="pragma_unroll_explicit", ann_val=1)


def _row_vectors(sch, block, along, step) -> None:
    """Each buffer the block reads or writes along its row (the last index uses a var of `along`)
    moves through registers one vector per `step` iteration: one vector load or store, the block
    itself computing lane by lane from the registers. Bool buffers, buffers read in a branch (see
    `_through_registers`), per-row values (the row's max) and the block's accumulators stay in place."""
    branched = branched_buffers(sch.get(block))
    depth = 1 + [sch.get(loop).same_as(sch.get(step)) for loop in sch.get_loops(block)].index(True)

    def row_vector(region, skip) -> bool:  # a span of no fixed width (`pos[k] - pos[q]`) is read in place
        return bool(region.region) and str(region.source.dtype) != "bool" and \
            str(region.source.ty.storage_scope) != "local" and not any(
            region.source.same_as(b) for b in skip) and any(uses(region.region[-1].min, v) for v in along) \
            and all(isinstance(r.extent, tirx.IntImm) for r in region.region) and one_vector(region, sch.get(step))
    written = [region.source for region in sch.get(block).writes]
    for index in reversed(range(len(sch.get(block).reads))):
        if row_vector(sch.get(block).reads[index], list(branched) + written):
            cache = sch.cache_read(block, index, "local", consumer_blocks=[block])  # the others read x
            sch.compute_at(cache, step)
            loops = sch.get_loops(cache)
            if len(loops) > depth:  # the region is a vector, not one element
                sch.vectorize(loops[-1])
    if sch.get(block).init is not None:
        return  # a reduction's result is written once per row, by the cross-thread reduction
    for index in reversed(range(len(sch.get(block).writes))):
        if row_vector(sch.get(block).writes[index], []):
            cache = sch.cache_write(block, index, "local")
            sch.reverse_compute_at(cache, step)
            loops = sch.get_loops(cache)
            if len(loops) > depth:
                sch.vectorize(loops[-1])


def _divides_read_twice(sch, block) -> bool:
    """An element-wise block that divides floats and that two blocks read (a softmax's scaled input
    `maximum(x, y) / 0.7`, read by the row's max and by its exp): computed once into registers, where
    inlined it cost an IEEE division (and the NaN-aware maximum's selects) per element in each pass."""
    value = block_value(sch, block)
    return value is not None and not reduce_count(sch, block) and len(sch.get_consumers(block)) >= 2 and \
        str(value.ty.dtype).startswith("float") and bool(find_all(value, tirx.Div))


def _along_row(sch, block, width) -> bool:
    """Whether the block runs along the row (its innermost loop is the row's width), not once per row
    (a norm's mean, `sum / n`, read by the variance and by the output)."""
    loops = sch.get_loops(block)
    return bool(loops) and isinstance(width, int) and get_extent(sch, loops[-1]) == width


def _same_extents(a, b) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))
