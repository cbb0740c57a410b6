"""GPU rule SplitReduction: reductions to few results (`x.sum()`, a few long rows, the softmax or norm of
one) shared out over a full grid of blocks that each reduce a grid-stride share with vector loads,
then a second kernel that folds the partial results; several reductions over the same rows one after
another, each in its two launches."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import (contiguous_reduction, find_all, fuse, in_registers, normalized, reduce_count,
                       static_product, uses)
from .inlining import GPU_CALL_DEPTH, inline
from .lanes import contiguous_lanes, innermost_var, substituted, unvectorisable
from .reasons import decline
from .staging import staged
from .tails import rewrite_loops


class SplitReduction(GPUScheduleRule):
    """A reduction to few results over contiguous elements (`x.sum()`, `x.mean()`, a row sum of 4 long
    rows), with any element-wise epilogue: Dlight gives each result one block, or one thread, and leaves
    the GPU idle. Here a grid of `grid` blocks (a wave on an H100/H200) shares the rows out: each thread
    loads 16-byte vectors over a grid-stride share of its row into registers, one partial result a
    lane (`_partials`), the block reduces its threads' partials (warp shuffles), and a second kernel
    folds the blocks' partial results with one block a row. The ragged end of a row of any size, a
    symbolic one too, is a predicate on the last step alone (`whole_steps`): the steps before it
    load with no branch between them, and the cross-thread reduction runs under no predicate (TVM
    would leave racing threads under one that mixes the block index in). A row short enough for a
    block (`min_chunk`) is reduced by one block in one launch.

    A row kernel of several reductions (a softmax's max and sum, a norm's mean and variance) over few
    long rows is split the same way, reduction after reduction, each reading the last one's folded
    results from memory, with the element-wise work between them a grid of its own: one block a row
    (the row rules) left a GPU of 132 SMs with 1 to 32 busy. Shorter rows (`_long`) stay with the row
    rules: one launch, each row read once."""

    def __init__(self, threads: int = 256, grid: int = 1056, max_rows: int = 32, min_chunk: int = 4096,
                 min_steps: int = 2, max_long_rows: int = 128, long_row: int = 1 << 18, few_rows: int = 8,
                 vector_bytes: int = 16, max_lanes: int = 4):
        self.threads, self.grid, self.max_rows, self.min_chunk = threads, grid, max_rows, min_chunk
        self.min_steps, self.max_long_rows = min_steps, max_long_rows
        self.long_row, self.few_rows = long_row, few_rows
        self.vector_bytes, self.max_lanes = vector_bytes, max_lanes   # the element-wise grids' (`_grids`)

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
        return whole_steps(sch)

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
        """Cut `red` over a grid of blocks that each reduce a strided share of their row into a partial
        result (`_partials`), then fold the partial results with one block a row; a short row is
        reduced by one block in one launch. Returns the fold's row loop."""
        rows = static_product(sch, sch.get_loops(red)[:n_rows]) or 1
        lanes = self._lanes(sch, red)
        k = fuse(sch, sch.get_loops(red)[n_rows:])
        extent = get_extent(sch, k)
        if not isinstance(extent, int) or extent > 2 * self.min_chunk:
            self._partials(sch, red, k, extent, rows, lanes)
        *spatial, reduced = sch.get_loops(red)  # the fold of the partial results, or the whole reduction
        if not spatial:
            spatial = [sch.add_unit_loop(red)]
        row = fuse(sch, spatial)
        _, lane = sch.split(reduced, [None, self.threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        return row

    def _lanes(self, sch, red) -> int:
        """Elements a thread loads as one vector of at most 16 bytes: consecutive, aligned steps of the
        innermost reduced loop over consecutive elements of every buffer read (lanes.contiguous_lanes),
        for a reduction of one result (an argmax's pairs stay scalar). TVM's CUDA code generator
        spells no vector of more than 4 bools (a NaN-propagating max compares lanes) or of 64-bit
        lanes, nor more than 8 of 16 or 32 bits (an accumulator wider than the loads); 16 bytes (an
        int8 max's) it does once cuda_spelling writes their starting value as 4 words."""
        stmt = sch.get(red)
        if len(stmt.writes) != 1:
            return 1
        widest = max((tvm.DataType(r.source.ty.dtype).bits for r in stmt.reads), default=32)
        accumulator = tvm.DataType(stmt.writes[0].source.ty.dtype).bits
        compares = any(find_all(stmt.body, kind) for kind in (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE))
        most = min(128 // max(widest, 8), 256 // accumulator, 4 if compares or not 8 <= accumulator <= 32 else 16)
        if most * accumulator > 128 and _broadcasts(stmt):
            # TVM spells one value broadcast to more than 4 floats (`x * 0.5`'s constant, a per-row
            # scale) as make_ulonglong4 of 8 arguments, which nvcc refuses (fuzz 48000299)
            most = 128 // accumulator
        return contiguous_lanes(sch, sch.get_loops(red)[-1], max(1, most))

    def _partials(self, sch, red, k, extent, rows: int, lanes: int) -> None:
        """A grid of `_blocks` blocks a row: element ((step * blocks + block) * threads + thread) * lanes
        + lane of the row goes to that thread, which keeps `lanes` partial results in registers (its
        loads one vector each, lanes independent chains of arithmetic); the block then reduces its
        threads' partials across lanes and threads (warp shuffles) into one partial result of the
        block, stored for the fold. The grid-stride order keeps every block's loads of one step
        contiguous and leaves the ragged end to the last step's predicate, which the cross-thread
        reduction never sees (its partials are registers every thread holds)."""
        vectors = sch.split(k, [None, lanes])[0] if lanes > 1 else k
        blocks = self._blocks(extent, rows, lanes)
        _, block, _ = sch.split(vectors, [None, blocks, self.threads])
        per_block = sch.rfactor(block, factor_axis=0)
        per_lane = sch.rfactor(fuse(sch, sch.get_loops(per_block)[-2 if lanes > 1 else -1:]), factor_axis=0)
        *row_loops, step, block, flat = sch.get_loops(per_lane)
        thread, lane = sch.split(flat, [None, lanes]) if lanes > 1 else (flat, None)
        sch.reorder(block, thread, step)
        sch.bind(fuse(sch, row_loops + [block]), "blockIdx.x")
        sch.bind(thread, "threadIdx.x")
        for index in range(len(sch.get(per_lane).writes)):
            sch.set_scope(per_lane, index, "local")
        if lanes > 1:
            sch.vectorize(lane)   # (before the init is split off: TVM vectorises no bare update)
        init = sch.decompose_reduction(per_lane, step)
        if lanes > 1:  # TVM spells a constant of 8 floats as make_ulonglong4 of 8 arguments: unrolled
            wide = lanes * tvm.DataType(sch.get(per_lane).writes[0].source.ty.dtype).bits > 128
            (sch.unroll if wide else sch.vectorize)(sch.get_loops(init)[-1])
        # the block's partial result: its threads' lanes, reduced across the block
        sch.reverse_compute_at(per_block, sch.get_loops(per_lane)[0])
        thread, _ = sch.split(sch.get_loops(per_block)[-1], [None, lanes]) if lanes > 1 else (
            sch.get_loops(per_block)[-1], None)
        sch.bind(thread, "threadIdx.x")
        sch.annotate(sch.get_loops(per_lane)[-2 if lanes > 1 else -1], LAST_STEP_RAGGED, 1)

    def _blocks(self, extent, rows: int, lanes: int) -> int:
        """Blocks a row: enough that the grid fills the GPU (`grid` blocks in all: a wave of 256-thread
        blocks on every SM of an H100/H200), no more than leave each thread `min_steps` vectors."""
        wanted = max(1, self.grid // rows)
        if isinstance(extent, int):
            wanted = min(wanted, max(1, extent // (lanes * self.threads * self.min_steps)))
        return wanted

    def _grids(self, sch, blocks) -> None:
        """Element-wise blocks between or after reductions, each a grid over its elements, a thread a
        vector of `vector_bytes` of its widest buffer (at most `max_lanes`) where every access is whole vectors
        (`contiguous_lanes`: a folded result per row is one value for all lanes), through registers
        where its math has no vector form (p171's `erf(d * rsqrt(var) ...)` over 4921 x 3 x 1000: a
        thread an element moved 4-byte scalars, 68 us on an H200 where torch.compile took 25)."""
        for block in blocks:
            loops = sch.get_loops(block)
            widest = max(tvm.DataType(r.source.ty.dtype).bits // 8 for r in [*sch.get(block).reads,
                                                                             *sch.get(block).writes])
            lanes = contiguous_lanes(sch, loops[-1], min(self.max_lanes, max(1, self.vector_bytes // widest)))
            vec, var = None, innermost_var(sch, loops[-1])  # (the row's variable: lanes > 1 found it)
            if lanes > 1:
                inner, vec = sch.split(loops[-1], [None, lanes])
                loops = [*loops[:-1], inner]
            grid, lane = sch.split(fuse(sch, loops), [None, self.threads])
            sch.bind(grid, "blockIdx.x")
            sch.bind(lane, "threadIdx.x")
            if vec is None:
                continue
            stmt = sch.get(block)
            if unvectorisable(stmt, lanes) or len(stmt.writes) > 1:
                staged(sch, block, lane, var, lanes)
                sch.unroll(vec)
            else:
                sch.vectorize(vec)

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


LAST_STEP_RAGGED = "babytriton.last_step_ragged"  # a loop of which only the last step has a predicate


def whole_steps(sch):
    """The schedule with each loop annotated LAST_STEP_RAGGED (the steps of a grid-stride share of a
    row, `_partials`) cut in two: all steps but the last without the predicate on the loop's index (it
    holds there by construction), then the last step with it. A predicate in every step puts a branch
    around every load, and the GPU then has one load a thread in flight, not one a step of the
    unrolled loop."""
    return rewrite_loops(sch, lambda loop: LAST_STEP_RAGGED in loop.annotations, _cut_last_step)


def _cut_last_step(step):
    """`for s in range(n)` over a block (maybe in a vectorised loop) as `for s in range(n - 1)` over the
    block without the conjuncts of its predicate that use s, then the block for s = n - 1, renamed
    with fresh variables."""
    annotations = {k: v for k, v in step.annotations.items() if k != LAST_STEP_RAGGED}
    inner = step.body if isinstance(step.body, tirx.For) else None
    realize = inner.body if inner is not None else step.body
    kept = [t for t in _conjuncts(realize.predicate) if not uses(t, step.loop_var)]
    predicate = tirx.const(True, "bool")
    for test in kept:
        predicate = test if is_true(predicate) else tirx.And(predicate, test)

    def nest(var, inner_var, realize_):
        body = realize_ if inner is None else tirx.For(inner_var, inner.min, inner.extent, inner.kind, realize_,
                                                       inner.thread_binding, inner.annotations)
        return body
    whole = tirx.For(step.loop_var, step.min, step.extent - 1, step.kind, nest(
        step.loop_var, inner.loop_var if inner is not None else None,
        s_tir.SBlockRealize(realize.iter_values, predicate, realize.block)), step.thread_binding, annotations)
    defined = [iv.var for iv in realize.block.iter_vars] + [
        node.var for kind in (tirx.Bind, tirx.LetStmt, tirx.Let) for node in find_all(realize.block.body, kind)]
    fresh = {var: tirx.Var(var.name + "_last", var.ty.dtype) for var in defined}   # each defined once
    block = tvm_ffi.structural_map(realize.block, [(tvm.ir.Var, lambda var: fresh.get(var, var))])
    block = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint + "_last", block.body)
    loops = {step.loop_var: step.min + step.extent - 1}
    if inner is not None:
        loops[inner.loop_var] = tirx.Var(inner.loop_var.name + "_last", inner.loop_var.ty.dtype)
    # no last step where there is no step at all (a symbolic size of 0 elements)
    last = s_tir.SBlockRealize([substituted(v, loops) for v in realize.iter_values],
                               tirx.And(substituted(realize.predicate, loops), step.extent > 0), block)
    if inner is not None:
        last = tirx.For(loops[inner.loop_var], inner.min, inner.extent, inner.kind, last, inner.thread_binding,
                        inner.annotations)
    return tirx.SeqStmt([whole, last])


def _conjuncts(predicate) -> list:
    """The conditions and-ed together in a predicate."""
    if isinstance(predicate, tirx.And):
        return _conjuncts(predicate.a) + _conjuncts(predicate.b)
    return [predicate]


def is_true(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and bool(expr.value)


def _broadcasts(block) -> bool:
    """Whether a reduction's update reads a value that is the same in every lane of a vector along its
    reduced axes: a float constant, or a load indexed by none of them."""
    reduced = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    value = block.body.value if isinstance(block.body, tirx.BufferStore) else block.body
    written = {w.source for w in block.writes}
    loads = [ld for ld in find_all(value, tvm.ir.TensorLoad) if not any(ld.source.same_as(w) for w in written)]
    return bool(find_all(value, tirx.FloatImm)) or any(
        not any(uses(i, v) for i in ld.indices for v in reduced) for ld in loads)
