"""GPU rule InnerReduction: any kernel over rows that reduces along the innermost axis only (a row sum or
max, max and argmax, a softmax, a norm, a cross-entropy, several statistics of the same rows), whatever
the rows' width (narrow, ragged, long or symbolic), its number of inputs and outputs and its dtypes."""
from __future__ import annotations

import functools
import operator

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import (contiguous_reduction, find_all, fuse, in_registers, is_buffer, is_int, kept_in_order, normalized,
                       reduce_count, uses)
from .inlining import GPU_CALL_DEPTH, inline
from .kept_rows import in_flat_rows, keep_rows, kept_inputs, kept_threads
from .lanes import branched_buffers, contiguous_lanes, most_lanes, one_vector
from .reasons import decline
from .side_outputs import is_copy, written_by_copies


WARP = 32
KEPT_ROW = 256  # the widest row of an intermediate a thread keeps in registers (1 KiB of float32: registers.py)


class InnerReduction(GPUScheduleRule):
    """A kernel whose blocks all work on the same rows: reductions along the rows' innermost, contiguous
    axis (one or several results per row: an argmax's (index, value), an online softmax's (max, sum)),
    element-wise blocks over the rows or over one value per row, in any order and with any number of
    inputs and outputs. The iteration space picks the launch:

    * a row is spread over `threads` threads (a power of two: `_threads`), each reading `lanes`
      contiguous elements per step, as one vector where whole vectors tile the row (16 bytes of the
      widest dtype along it), one element where they don't (a width of 50257, a symbolic one); the
      vectors of a last step that the threads don't fill are predicated off;
    * narrow rows take few threads, and a block holds several rows (`threadIdx.y`) so that it has at
      least `block_threads` threads: 64 experts of float32 over 32768 tokens are 4 threads per row (4
      vectors each), 32 rows per block. A warp, or part of one, reduces with shuffles;
    * long rows loop: each thread accumulates its steps in registers, then the row's threads reduce;
      few rows get more threads each (up to 1024), until `busy_threads` are in flight;
    * an input that several blocks read along the row (a norm's mean, variance and output) is read
      once into the threads' registers where a thread's share fits, with more threads (up to 1024)
      where that makes it fit (kept_rows.py: Inductor's persistent reduction).
    The blocks run one after the other inside one loop over the rows (`sch.merge`), each split over
    the row's threads the same way, so a thread reads back only what it wrote itself (`_own_reads`)
    and no barrier is needed between them. A row's reduced values stay in registers: TVM's all-reduce
    leaves them in every thread of the row."""

    def __init__(self, block_threads: int = 128, max_threads: int = 256, vector_bytes: int = 16,
                 vectors: int = 4, busy_threads: int = 1 << 17, symbolic_threads: int = 128,
                 shared_width: int = KEPT_ROW):
        self.block_threads, self.max_threads, self.vector_bytes = block_threads, max_threads, vector_bytes
        self.shared_width = shared_width  # rows up to this wide keep a value several passes read (`apply`)
        self.vectors = vectors  # vectors per thread that size a row's threads (`_threads`)
        self.busy_threads = busy_threads  # threads in flight that keep every SM of an H100 busy
        self.symbolic_threads = symbolic_threads  # threads per row of a symbolic width

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        infos, copies = written_by_copies(sch, infos)  # results besides the last: from registers
        copied = [info for info in infos if is_copy(sch, info.block_rv, copies)]
        reductions = [info.block_rv for info in infos if reduce_count(sch, info.block_rv)]
        if not reductions:
            return None  # no reduction: another kind of kernel
        space = _row_space(sch, reductions)  # (inlining leaves a reduction's loops as they are)
        if space is None:
            return None
        # Over narrow rows, a value that is not cheap and that several passes read (a softmax's exp: its
        # sum and its output) is computed once into the threads' registers, not once per pass: p197's
        # erf/sigmoid/sqrt/sin/tanh prologue inlined into four passes ran 337 math calls a thread (46 us
        # on an H200; torch.compile's persistent reduction 15 us). Wider rows recompute it (`_recomputed`).
        shared = not (isinstance(space[1], int) and space[1] <= self.shared_width)
        blocks = kept_in_order(infos, inline(sch, infos, GPU_CALL_DEPTH, keep=copies, shared=shared), copied)
        recomputed = self._recomputed(sch, func, blocks, *space)
        nests = _nests(sch, blocks, *space)
        if nests is None:
            return None
        if not _own_reads(sch, nests):
            return decline("a block reads another's result at another element (a shift, a transpose)")
        rows, width = space
        if not isinstance(width, int) and _intermediate_elements(sch, nests):
            # a thread's share of a symbolic row is a symbolic count: no register array holds it
            return decline("elements kept between passes over a row of symbolic width")
        lanes = self._lanes(func, width)
        threads, per_block = self._shape(rows, width, lanes)
        kept = kept_inputs(sch, nests, func, rows, width)  # read by several passes: into registers once
        wider = kept_threads(kept, width, lanes, threads) if kept else None
        if wider is None:
            kept = []
        else:
            threads, per_block = wider, self._per_block(rows, wider)
        # asked before the merge (an image's rows, vectors too) and before the kept rows, whose
        # (step, thread, lane) layout no longer reads a vector's lanes at consecutive indices
        whole = [column is not None and lanes > 1 and (
            isinstance(width, int) and in_flat_rows(sch, block, row, column, width)
            or contiguous_lanes(sch, column, lanes) == lanes) for block, row, column in nests]
        row = sch.merge(*[row for _, row, _ in nests]) if len(nests) > 1 else nests[0][1]
        grid, row = sch.split(row, [None, per_block])
        sch.bind(grid, "blockIdx.x")
        sch.bind(row, "threadIdx.y" if threads > 1 else "threadIdx.x")
        for block in blocks:  # first: vectors then move only what stays in global memory
            in_registers(sch, block)  # a row's value, a per-row value or an element (`_own_reads`)
        keep_rows(sch, blocks, kept, row, width, threads, lanes)
        for (block, _, column), vectors in zip(nests, whole):
            self._spread(sch, block, column, threads, lanes, unrolled=bool(kept), whole=vectors)
        for copy, reader in recomputed:  # readers first: each copy then goes into its reader's innermost loop
            sch.compute_at(copy, sch.get_loops(reader)[-1], preserve_unit_loops=True)
        return sch

    def _recomputed(self, sch, func, blocks: list, rows, width) -> list:
        """Element-wise intermediates the inliner kept (too costly to inline) over rows wider than
        KEPT_ROW: copied into each reader (`cache_read`, then the original inlined into the copies),
        each copy computed element by element inside its reader's loop, as Inductor recomputes a
        reduction's prologue in each pass. Kept, a thread's share of a row (every `threads * lanes`-th
        run) is a register array as wide as the row: p73's rows of 32000, 112 KiB (declined: Fallback).
        Takes them out of `blocks`; the (copy, reader) pairs, readers before their own copies' copies."""
        if not isinstance(width, int) or width <= KEPT_ROW:
            return []
        params = [p for p in func.params if is_buffer(p)]
        pairs = []
        for block in [b for b in reversed(blocks) if not reduce_count(sch, b)]:
            written = sch.get(block).writes
            readers = sch.get_consumers(block)
            # (a value per row, a norm's rsqrt, stays one: computed once a row, not once an element)
            elements = functools.reduce(operator.mul, [iv.dom.extent for iv in sch.get(block).iter_vars], 1)
            if len(written) != 1 or not _same(elements, rows * width) or any(
                    written[0].source.same_as(p) for p in params) or not readers:
                continue
            for reader in readers:
                index = next(i for i, r in enumerate(sch.get(reader).reads) if r.source.same_as(written[0].source))
                # (local from the start: a reader's vectors then stage only what stays in global memory)
                pairs.append((sch.cache_read(reader, index, "local", consumer_blocks=[reader]), reader))
            sch.compute_inline(block)
            blocks.remove(block)
        return pairs

    def _lanes(self, func, width) -> int:
        """Elements per vector: `vector_bytes` of the widest dtype of the buffers with rows of this
        width, fewer where that many don't divide the width (1 for a symbolic or odd width)."""
        if not isinstance(width, int):
            return 1
        along = [p for p in func.params if is_buffer(p) and len(p.ty.shape) and
                 isinstance(p.ty.shape[-1], tirx.IntImm) and int(p.ty.shape[-1]) == width]
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in along), default=4)
        return most_lanes([width], max(self.vector_bytes // max(widest, 1), 1))

    def _shape(self, rows, width, lanes: int) -> tuple[int, int]:
        """(threads per row, rows per block): see `_threads`; rows share a block until it has
        `block_threads` threads (never more rows than there are)."""
        threads = self._threads(rows, width, lanes)
        return threads, self._per_block(rows, threads)

    def _per_block(self, rows, threads: int) -> int:
        per_block = max(self.block_threads // threads, 1)
        return min(per_block, _pow2_at_least(rows)) if isinstance(rows, int) else per_block

    def _threads(self, rows, width, lanes: int) -> int:
        """Threads per row: a power of two giving each about `vectors` vectors (up to `max_threads`;
        `symbolic_threads` for a symbolic width), one warp where that gives each at most twice as many,
        doubled for few rows (to 1024) until `busy_threads` run or each thread would have less than
        one vector."""
        if not isinstance(width, int):
            return self.symbolic_threads
        vectors = -(-width // lanes)
        threads = min(_pow2_at_least(-(-vectors // self.vectors)), self.max_threads)
        if threads > WARP and -(-vectors // WARP) <= 2 * self.vectors:
            # a row within one warp while that leaves each thread at most twice `vectors`: shuffles
            # only, no shared memory and barrier between two warps (H200, a program's kernels in all:
            # p24, rows of 139 halves, 79 -> 62 us; p0, rows of 1000 floats, 193 -> 160 us; rows of 96
            # halves at 2 threads instead of 4 lost, 64 -> 91 us: only the step across warps is taken)
            threads = WARP
        guess = rows if isinstance(rows, int) else 4096
        while threads < 1024 and guess * threads < self.busy_threads and threads * 2 <= vectors:
            threads *= 2
        return threads

    def _spread(self, sch, block, column, threads: int, lanes: int, unrolled: bool = False,
                whole: bool = False) -> None:
        """Split a block's columns over the row's threads as (thread, step, lane), through registers a
        vector at a time where a vector's columns are contiguous in every buffer (`whole`, asked before
        any split); the steps `unrolled` where it reads rows kept in registers (constant indices). A
        per-row block (no column) runs in every thread of the row (a value it keeps is then in each
        thread's registers)."""
        if column is None:
            return  # every thread of the row computes it; TVM has only the first store a kernel result
        vector, lane = sch.split(column, [None, lanes])
        step, thread = sch.split(vector, [None, threads])
        sch.reorder(thread, step, lane)
        if threads > 1:
            sch.bind(thread, "threadIdx.x")
        if unrolled:
            sch.unroll(step)
        sch.unroll(lane)
        if whole:
            _whole_vectors(sch, block, step)


def _row_space(sch, reductions):
    """(rows, width): the number of rows and the row's width of reductions that all reduce the same
    rows along their trailing loops, in which consecutive steps read consecutive elements; None (having
    said why) for other reductions."""
    spaces = []
    for block in reductions:
        loops = sch.get_loops(block)
        kinds = [iv.iter_type == tirx.IterVar.CommReduce for iv in sch.get(block).iter_vars]
        n_rows = len(loops) - sum(kinds)
        if len(kinds) != len(loops):
            return decline("a reduction whose loops are not one per axis")
        if any(kinds[:n_rows]):
            return decline("a reduced axis that is not innermost")
        if not (contiguous_reduction(sch, block) or _reads_nothing_along(sch, block)):
            return decline("reduces across rows (a column sum): not contiguous")
        spaces.append((_product(sch, loops[:n_rows]), _product(sch, loops[n_rows:])))
    if any(not (_same(r, spaces[0][0]) and _same(w, spaces[0][1])) for r, w in spaces):
        return decline("reductions over different rows")
    return spaces[0]


def _reads_nothing_along(sch, block) -> bool:
    """Whether no buffer the reduction reads depends on its reduced axes (a count: the sum of ones)."""
    stmt = sch.get(block)
    reduced = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    written = [region.source for region in stmt.writes]
    return not any(uses(r.min, var) for region in stmt.reads if not any(region.source.same_as(w) for w in written)
                   for r in region.region for var in reduced)


def _nests(sch, blocks, rows, width):
    """Each block's loops as (block, a loop over the rows, a loop over the row's columns or None for
    one value per row): the leading loops that make `rows` fused, the other loops of more than one
    step fused. None (having said why) when a block's loops don't divide so (other rows, a part of
    a row, a block outside every loop)."""
    nests = []
    for block in blocks:
        loops = sch.get_loops(block)
        cut = next((k for k in range(len(loops) + 1) if _same(_product(sch, loops[:k]), rows)), None)
        if cut is None:
            return decline("a block over other rows than the reductions'")
        columns = [loop for loop in loops[cut:] if get_extent(sch, loop) != 1]
        if columns and not _same(_product(sch, columns), width):
            return decline("a block over part of a row, or over something else than rows")
        try:
            row = fuse(sch, loops[:cut]) if cut else sch.add_unit_loop(loops[0] if loops else block)
            column = fuse(sch, columns) if columns else None
        except tvm.error.TVMError:  # spatial and reduced loops together: not a row
            return decline("a block over something else than rows")
        nests.append((block, row, column))
    return nests


def _own_reads(sch, nests) -> bool:
    """Whether each block reads what another block of the kernel wrote only at the element that the
    same row and column wrote (the same thread wrote it): both in terms of a common row and column."""
    realizes = find_all(sch.mod["main"].body, s_tir.SBlockRealize)
    analyzer = tvm.sym.Analyzer()
    written, shared = {}, {}  # shared: the common row and column variables, by name and dtype

    def common(loop, name):
        var = sch.get(loop).loop_var
        return var, shared.setdefault((name, var.ty.dtype), tirx.Var(name, var.ty.dtype))
    for block, row_loop, column_loop in nests:
        stmt = sch.get(block)
        common_vars = dict([common(row_loop, "row")] + ([common(column_loop, "column")] if column_loop else []))
        for loop in sch.get_loops(block):  # a unit loop (a per-row block's kept axis of one) is its start
            if is_int(sch.get(loop).extent, 1):
                common_vars.setdefault(sch.get(loop).loop_var, sch.get(loop).min)
        realize = next(r for r in realizes if r.block.same_as(stmt))
        values = {iv.var: _substituted(value, common_vars) for iv, value in zip(stmt.iter_vars, realize.iter_values)}
        own = [region.source for region in stmt.writes]
        for region in stmt.reads:
            wrote = written.get(region.source)
            if wrote is None or any(region.source.same_as(o) for o in own):
                continue
            here = [_substituted(r.min, values) for r in region.region]
            if not all(_same(r.extent, 1) for r in region.region) or not all(
                    analyzer.can_prove_equal(a, b) for a, b in zip(here, wrote)):
                return False
        for region in stmt.writes:
            written[region.source] = [_substituted(r.min, values) for r in region.region]
    return True


def _intermediate_elements(sch, nests) -> bool:
    """Whether an element-wise block along the row (a column, no reduction) writes a buffer that is no
    kernel result."""
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    return any(not any(region.source.same_as(p) for p in params)
               for block, _, column in nests if column is not None and not reduce_count(sch, block)
               for region in sch.get(block).writes)


def _whole_vectors(sch, block, step) -> None:
    """Each buffer the block reads or writes along the row moves through registers one vector per
    step (one 16-byte load or store; the caller checked that a vector's columns are consecutive
    elements of every buffer). Bool buffers, buffers read in a branch and the block's own
    accumulators stay as they are."""
    stmt = sch.get(block)
    column = [iv.var for iv in stmt.iter_vars][-1]
    skip = list(branched_buffers(stmt)) + [region.source for region in stmt.writes]
    depth = 1 + [sch.get(loop).same_as(sch.get(step)) for loop in sch.get_loops(block)].index(True)
    lanes = sch.get(sch.get_loops(block)[-1]).extent

    def along(region) -> bool:
        # a buffer read at several indices (`pos[k] - pos[q]` of a (T, T) bias recomputed in the
        # row) spans a range that moves with the thread, no vector of fixed width: read in place;
        # so is one whose last axis the lanes don't tile (flat rows of (10, 14) int16 over 4 lanes:
        # a vector would straddle two of its rows, a (2, 14) block CUDA has no type for)
        last = region.source.shape[-1] if region.region else None
        return bool(region.region) and str(region.source.dtype) != "bool" and \
            str(region.source.ty.storage_scope) == "global" and uses(region.region[-1].min, column) and \
            all(isinstance(r.extent, tirx.IntImm) for r in region.region) and one_vector(region, sch.get(step)) \
            and isinstance(last, tirx.IntImm) and isinstance(lanes, tirx.IntImm) and int(last) % int(lanes) == 0
    for index in reversed(range(len(stmt.reads))):
        region = stmt.reads[index]
        if along(region) and not any(region.source.same_as(s) for s in skip):
            cache = sch.cache_read(block, index, "local", consumer_blocks=[block])
            sch.compute_at(cache, step)
            _vectorize_inner(sch, cache, depth)
    if stmt.init is None:
        for index in reversed(range(len(stmt.writes))):
            if along(stmt.writes[index]):
                cache = sch.cache_write(block, index, "local")
                sch.reverse_compute_at(cache, step)
                _vectorize_inner(sch, cache, depth)


def _vectorize_inner(sch, cache, depth: int) -> None:
    loops = sch.get_loops(cache)
    if len(loops) > depth:  # the region is a vector, not one element
        sch.vectorize(loops[-1])


def _substituted(expr, binding):
    return tvm_ffi.structural_map(expr, [(tvm.ir.Var, lambda var: binding.get(var, var))])


def _product(sch, loops):
    total = 1
    for loop in loops:
        total = total * get_extent(sch, loop)
    return total


def _same(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return tvm.sym.Analyzer().can_prove_equal(a, b)


def _pow2_at_least(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()
