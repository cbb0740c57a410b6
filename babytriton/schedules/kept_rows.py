"""Rows read once (Inductor's persistent reduction): where several passes of a row kernel (a norm's
mean, its variance, its output) read the same input along the row, InnerReduction copies the row into
the threads' registers once, each thread its own vectors of it, and every pass reads it from there."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import find_all, fuse, is_buffer
from .lanes import flat_index, substituted
from .thread_slices import THREAD_AXIS

# what one thread keeps of its rows, all kept inputs together: 32 float32 registers (group norm's rows
# of 32768 over 1024 threads took 56 registers in all for sm_90: one block an SM); more would spill
KEPT_BYTES = 128
MAX_THREADS = 1024


def kept_inputs(sch, nests, func, rows, width) -> list:
    """The kernel's inputs that two blocks or more read along the row, each at the element of the
    reading block's own row and column (the copy in registers is then the reading thread's own); none
    where the width is symbolic."""
    if not isinstance(width, int):
        return []
    params = [p for p in func.params if is_buffer(p)]
    written = [region.source for block, _, _ in nests for region in sch.get(block).writes]
    readers = {}
    for block, row, column in nests:
        for region in sch.get(block).reads:
            buffer = region.source
            # (bool buffers become bytes after scheduling, bool_buffers_as_bytes: no vectors of them)
            if len(buffer.ty.shape) and str(buffer.ty.dtype) != "bool" and any(buffer.same_as(p) for p in params) \
                    and not any(buffer.same_as(w) for w in written):
                readers.setdefault(buffer, []).append((block, row, column))
    return [buffer for buffer, nests_of in readers.items() if len(nests_of) >= 2 and all(
        column is not None and _reads_own_element(sch, block, row, column, buffer, width)
        for block, row, column in nests_of)]


def kept_threads(buffers, width: int, lanes: int, threads: int) -> int | None:
    """The threads per row (from `threads`, doubled up to MAX_THREADS) at which each thread's share of
    the kept rows fits KEPT_BYTES and whole vectors of `lanes` tile the row; None where none does.
    One thread may hold a whole narrow row (a masked softmax over rows of 16: perf fuzzer p170 read
    each row three times, once per pass)."""
    row_bytes = width * sum(tvm.DataType(b.ty.dtype).bits // 8 for b in buffers)
    while threads < MAX_THREADS and row_bytes > KEPT_BYTES * threads and threads * 2 * lanes <= width:
        threads *= 2
    if row_bytes > KEPT_BYTES * threads or width < threads * lanes or width % (threads * lanes):
        return None
    return threads


def keep_rows(sch, blocks, buffers, row, width: int, threads: int, lanes: int) -> None:
    """Copy each of `buffers` once per row into the row's threads' registers, under the loop over the
    rows (`row`), each thread its own (step, thread, lane) elements, the layout in which the blocks
    then read them (their steps unrolled: `own_thread_slices` leaves each thread only its slice)."""
    for buffer in buffers:
        readers = [b for b in blocks if any(r.source.same_as(buffer) for r in sch.get(b).reads)]
        index = next(i for i, r in enumerate(sch.get(readers[0]).reads) if r.source.same_as(buffer))
        cache = sch.cache_read(readers[0], index, "local", consumer_blocks=readers)
        sch.compute_at(cache, row, preserve_unit_loops=True)
        column = fuse(sch, sch.get_loops(cache)[_depth(sch, cache, row):])
        step, thread, lane = sch.split(column, [None, threads, lanes])
        sch.reorder(thread, step, lane)
        if threads > 1:  # (a thread a row: the rows' loop is threadIdx.x)
            sch.bind(thread, "threadIdx.x")
        sch.unroll(step)
        # the lanes are consecutive, aligned elements (`_reads_own_element`, a width that tiles): a vector
        sch.vectorize(lane)
        shape = [int(d) for d in buffer.ty.shape]
        layout = _KeptLayout(shape, width, threads, lanes)
        sch.transform_layout(cache, ("write", 0), layout)
        sch.annotate(cache, THREAD_AXIS, layout.thread_axis)


class _KeptLayout:
    """The index map of a kept buffer: (row, step, thread, lane) of each element, so that a thread's
    elements lie apart from the others' (its thread axis, `thread_axis`), less the axes of one step
    (TVM inverts no map with a constant index)."""

    def __init__(self, shape, width: int, threads: int, lanes: int):
        self.shape, self.width, self.threads, self.lanes = shape, width, threads, lanes
        total = 1
        for d in shape:
            total *= d
        extents = (total // width, width // (threads * lanes), threads, lanes)
        self.axes = [n for n, extent in enumerate(extents) if extent > 1 or n == 2]
        self.thread_axis = self.axes.index(2)

    def __call__(self, *indices):
        flat = flat_index(list(indices), self.shape)
        column = flat % self.width
        tile = self.threads * self.lanes
        full = (flat // self.width, column // tile, column // self.lanes % self.threads, column % self.lanes)
        return tuple(full[n] for n in self.axes)


def _depth(sch, block, loop) -> int:
    """How many of the block's loops enclose `loop`'s body: `loop` and the loops around it."""
    target = sch.get(loop)
    loops = sch.get_loops(block)
    return 1 + [sch.get(other).same_as(target) for other in loops].index(True)


def in_flat_rows(sch, block, row_loop, column_loop, width: int) -> bool:
    """Whether every kernel buffer that the block reads or writes along the row is accessed at the flat
    element row * width + column (an NCHW image's rows over H x W): consecutive columns are then
    consecutive elements, a whole vector where the width tiles, as `contiguous_lanes` finds for rows
    indexed by their last axis alone."""
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    stmt = sch.get(block)
    column = [iv.var for iv in stmt.iter_vars][-1]
    buffers = {region.source for region in [*stmt.reads, *stmt.writes]
               if any(region.source.same_as(p) for p in params)
               and any(_uses(r.min, column) for r in region.region)}
    return bool(buffers) and all(_reads_own_element(sch, block, row_loop, column_loop, b, width, True)
                                 for b in buffers)


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(expr))


def _reads_own_element(sch, block, row_loop, column_loop, buffer, width: int, writes: bool = False) -> bool:
    """Whether every read of `buffer` by `block` (and write, with `writes`) is the one element at flat
    index row * width + column of the block's own row and column loops (the buffer holds the kernel's
    rows, row-major)."""
    stmt = sch.get(block)
    realize = next(r for r in find_all(sch.mod["main"].body, s_tir.SBlockRealize) if r.block.same_as(stmt))
    values = {iv.var: value for iv, value in zip(stmt.iter_vars, realize.iter_values)}
    row, column = sch.get(row_loop), sch.get(column_loop)
    analyzer = tvm.sym.Analyzer()
    for loop in sch.get_loops(block):
        analyzer.bind(sch.get(loop).loop_var, tvm.ir.Range.from_min_extent(sch.get(loop).min, sch.get(loop).extent))
    own = row.loop_var * width + column.loop_var
    shape = list(buffer.ty.shape)
    if not all(isinstance(d, tirx.IntImm) for d in shape) or get_extent(sch, column_loop) != width:
        return False
    for region in [*stmt.reads, *(stmt.writes if writes else [])]:
        if not region.source.same_as(buffer):
            continue
        if not all(isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1 for r in region.region):
            return False
        index = flat_index([substituted(r.min, values) for r in region.region], shape)
        if not analyzer.can_prove_equal(index, own):
            return False
    return True
