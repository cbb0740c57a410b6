"""CPU rule CPUReduction: reductions alone or with element-wise blocks (softmax, layernorm, mean):
rows in parallel with vectors of partial results, few or long rows cut into chunks, columns
vectorised across the kept elements."""
from __future__ import annotations

import math

import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.sym.pattern import detect_linear_equation

from .analysis import (calls_long_math, compared_with_its_reduction, contiguous_reduction, find_all, fuse, is_int,
                       kept_in_order, math_read_broadcast, math_read_twice, normalized, reduce_count, static_product,
                       uses)
from .cpu_rule import (CPURule, MIN_PARALLEL_ELEMENTWISE, MIN_PARALLEL_REDUCTION, pow2_divisor, vector_lanes,
                       vectorizable)
from .inlining import inline
from .lanes import substituted, uniform_lanes
from .reasons import decline
from .side_outputs import is_copy, written_by_copies
from .tails import conjuncts, rewrite_loops, with_tails

CLAMPED = "babytriton.clamped_rows"  # a loop of rows as vector lanes, its last vector clamped (`_clamp_rows`)


class CPUReduction(CPURule):
    """Reductions, alone or in a kernel with element-wise blocks (softmax, layernorm, mean):

    * rows (a reduction over contiguous elements, at least `min_rows` of them): one row per parallel
      iteration; the row is summed into `accum` partial results that fill vector registers (rfactor),
      then folded. A row of any length: an odd, prime or symbolic one is whole vectors and a scalar
      tail (`with_tails`), its element-wise blocks too. A kernel of several blocks over the same rows (softmax: max, exp-sum, divide)
      inlines its element-wise blocks and computes every block per row inside one parallel loop.
    * rows shorter than two vectors (softmax over rows of 7): a vector's lanes are rows instead,
      steps of `lanes` rows in parallel, every block per step, each row reduced in order by its lane.
    * a full reduction, or too few rows: the reduction is first cut into `parts` chunks (rfactor)
      that become the parallel rows; the final fold of `parts` values, and any epilogue, is tiny.
    * columns (`x.sum(axis=0)`, a middle axis): parallel over the kept elements, the reduction loop
      outside a vector of contiguous kept elements.
    `decompose_reduction` comes last: after it TVM refuses to vectorise or parallelise loops above."""

    def __init__(self, accum: int = 64, parts: int = 256, min_rows: int = 64):
        self.accum, self.parts, self.min_rows = accum, parts, min_rows

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None or not self.schedule(sch, infos, target):
            return None
        return rewrite_loops(with_tails(sch), lambda loop: CLAMPED in loop.annotations, _clamp_rows)

    def schedule(self, sch, infos, target):
        if all(info.is_injective() for info in infos):
            return False
        lanes = vector_lanes(sch, target)
        infos, self.copies = written_by_copies(sch, infos)  # results besides the last, stored at the row
        keep = [info for info in infos[:-1] if math_read_twice(sch, info.block_rv, through_producers=True, within=True)
                or math_read_broadcast(sch, info.block_rv) or compared_with_its_reduction(sch, info.block_rv)
                or is_copy(sch, info.block_rv, self.copies)]
        remaining = inline(sch, infos[:-1], keep=[info.block_rv for info in keep])
        blocks = kept_in_order(infos[:-1], remaining, keep) + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        if not reductions:
            return decline("no reduction block left after inlining")
        first = reductions[0]
        loops = sch.get_loops(first)
        rows = static_product(sch, loops[:len(loops) - reduce_count(sch, first)])
        work = static_product(sch, loops)
        # a launch costs more than a small reduction; each block is a pass over the rows
        passes = len(blocks)
        self.threads = work is None or work * passes > MIN_PARALLEL_REDUCTION
        self.vectors = vectorizable(sch)
        many_rows = rows is None or rows >= self.min_rows
        pairs = any(len(sch.get(b).writes) > 1 for b in reductions)
        whole = rows == 1 or len(loops) == reduce_count(sch, first)
        if pairs and (len(blocks) == 1 or whole):  # (with other blocks over rows: a row each, `_rows`)
            return self._pairs(sch, blocks, first, many_rows, lanes)
        if len(blocks) == 1:
            return self._single(sch, first, lanes, many_rows)
        if reduce_count(sch, blocks[-1]) and not all(contiguous_reduction(sch, b) for b in reductions):
            # (a per-row result last, over rows: `_rows` or `_passes` below; row_partials.py makes them)
            return decline("its last block is a reduction too (reductions in sequence), some over columns")
        lined = _rows_line_up(sch, blocks, reductions)
        if (many_rows or pairs) and lined and all(contiguous_reduction(sch, b) for b in reductions):
            return self._rows(sch, blocks, reductions, lanes)
        if pairs:  # (cut into chunks, `_passes`, they would be reduced to chunk-local pairs)
            return decline("(index, value) pairs with other blocks, over rows that don't line up")
        for b in blocks:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
        if len(reductions) == 1 and blocks.index(first) == 0:
            # a mean, an RMS norm: the reduction as one block would be, then its epilogue (as many
            # elements as the input where it scales the rows) in parallel and vectorised
            self._single(sch, first, lanes, many_rows)
            for b in blocks[1:]:
                self._spread(sch, b, lanes)
            return True
        if not lined:  # each block a loop nest of its own: results along any axis, computed once
            return self._passes(sch, blocks, lanes, many_rows)
        if all(contiguous_reduction(sch, b) for b in reductions):
            if rows == 1 or self.threads and self._long(sch, first, rows):
                return self._passes(sch, blocks, lanes)
            # few rows (32 softmax rows): still one row per parallel iteration, each row vectorised
            return self._rows(sch, blocks, reductions, lanes)
        return decline("a reduction across rows (a column) among several blocks")

    def _pairs(self, sch, blocks, first, many_rows, lanes):
        """argmax's (index, value) pairs. Many rows: the rows in parallel, each reduced in order
        (rfactor into vectors mixed up its NaN-aware combiner). A whole-tensor argmax: cut into chunks
        (`_cut`) reduced in parallel, each in order and without vectors, then their pairs folded. The
        combiner orders pairs totally (a NaN first, then the better value, then the smaller index) and
        the identity loses to any element, so any order of folding gives torch's pair: the first index
        of the maximum, or of the first NaN. An element-wise block kept before it (math that
        `inline` does not copy into the combiner) is a pass of its own, in parallel and vectorised."""
        if not self.threads:
            return decline("(index, value) pairs over too little work to spread")
        loops = sch.get_loops(first)
        n_rows = len(loops) - reduce_count(sch, first)
        if many_rows:
            if len(blocks) != 1 or not n_rows:
                return decline("(index, value) pairs with other blocks")
            sch.parallel(fuse(sch, loops[:n_rows]))
            return True
        whole = not n_rows or static_product(sch, loops[:n_rows]) == 1
        if not whole or not any("int" in str(w.source.dtype) for w in sch.get(first).writes):
            # left to the other rules (Dlight's: rows in parallel): a few rows cut into chunks gave a
            # bfloat16 argmax (its values cast to float32) chunk-local indices, and an online softmax's
            # (sum, max) pairs wrong sums
            return decline("(index, value) pairs over a few rows, or pairs of floats")
        for b in blocks:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
        for b in blocks:
            if not reduce_count(sch, b):
                self._spread(sch, b, lanes)
        rf = self._cut(sch, first, n_rows)
        *chunks, inner = sch.get_loops(rf)
        sch.parallel(fuse(sch, chunks))
        sch.decompose_reduction(rf, inner)
        sch.decompose_reduction(first, sch.get_loops(first)[-1])
        return True

    FEW_ROWS = 16        # rows fewer than this, each at least LONG_ROW long: a pass per block (`_passes`)
    LONG_ROW = 8192
    CHUNK = 4096         # an odd or symbolic row's chunk in an element-wise pass (`_spread`)

    def _long(self, sch, block, rows) -> bool:
        """Whether a reduction's rows are few and long: one row per parallel iteration would leave
        threads idle (a logsumexp of one row of 200,000: one thread)."""
        loops = sch.get_loops(block)
        extent = static_product(sch, loops[len(loops) - reduce_count(sch, block):])
        return rows is not None and rows < self.FEW_ROWS and (extent is None or extent >= self.LONG_ROW)

    def _passes(self, sch, blocks, lanes, many_rows=False):
        """Few long rows and several blocks (a softmax, layernorm or logsumexp of a few rows of
        100,000), or one row of any length: each block is a pass of its own over every row, a
        reduction cut into chunks that run in parallel (`_single`), an element-wise block spread in
        parallel and vectorised (`_spread`), rather than each row on one thread. Also (`many_rows`)
        blocks whose rows don't line up (`_rows_line_up`): each reduction then as it would be alone."""
        for b in blocks:
            if reduce_count(sch, b):
                self._single(sch, b, lanes, many_rows=many_rows)
            else:
                self._spread(sch, b, lanes)
        return True

    def _spread(self, sch, block, lanes):
        """An element-wise block in a loop nest of its own (the epilogue of a reduction cut into
        chunks: the scaling of an RMS norm's rows, a mean's division): its loops fused, the innermost
        `lanes` vectorised and the rest in parallel, as CPUElementwise does. Where the size has no
        whole vectors and its rows are long (an odd or symbolic row) the rows go in parallel in
        chunks of CHUNK elements, whose contiguous loop LLVM vectorises."""
        loops = sch.get_loops(block)
        if not loops:
            return
        total = static_product(sch, loops)
        threads = total is None or total >= MIN_PARALLEL_ELEMENTWISE
        *outer, inner = loops
        row = get_extent(sch, inner)
        long_row = not isinstance(row, int) or row >= 2 * self.CHUNK
        most = uniform_lanes(sch, block, inner, lanes) if self.vectors else 1
        vector = pow2_divisor(total, most) if total is not None else 1
        if vector > 1 and (vector == most or not long_row):
            fused, lane = sch.split(fuse(sch, loops), [None, vector])
            sch.vectorize(lane)
            if threads:
                sch.parallel(fused)
        elif threads and long_row and outer:  # (a fused index would divide by the odd row per element)
            chunks, _ = sch.split(inner, [None, self.CHUNK])
            sch.parallel(fuse(sch, [*outer, chunks]))
        elif threads:  # one loop: each thread's range of it is a plain loop
            sch.parallel(fuse(sch, loops))

    def _parallel(self, sch, loop):
        if self.threads:
            sch.parallel(loop)

    def _vectorize(self, sch, loop):
        if self.vectors:
            sch.vectorize(loop)

    # one reduction block ---------------------------------------------------------------------------
    def _single(self, sch, block, lanes, many_rows):
        n_red = reduce_count(sch, block)
        n_rows = len(sch.get_loops(block)) - n_red
        contiguous = contiguous_reduction(sch, block)
        if many_rows and n_rows and not contiguous:
            return self._columns(sch, block, n_rows, lanes)
        fold = None
        if not many_rows or not n_rows:
            fold, block = block, self._cut(sch, block, n_rows)
            n_rows = len(sch.get_loops(block)) - 1
        row, rf = _rfactor_rows(sch, block, n_rows, self.accum, lanes)
        if rf is None:  # a row shorter than two vectors: rows in parallel, each summed serially
            self._parallel(sch, row)
            sch.decompose_reduction(block, sch.get_loops(block)[-1])
        else:
            sch.reverse_compute_at(block, row)  # fold each row's partials right after it
            ko, ki = sch.get_loops(rf)[-2:]
            self._vectorize(sch, ki)
            self._parallel(sch, row)
            sch.decompose_reduction(rf, ko)
        if fold is not None:  # initialised outside its loop: with no chunks at all (size 0) it is 0
            sch.decompose_reduction(fold, sch.get_loops(fold)[-1])
        return True

    def _cut(self, sch, block, n_rows):
        """Few rows: split the reduction into up to `parts` chunks of at least 2048 elements, made rows
        of their own (rfactor). An odd or symbolic size gets chunks of a fixed size, the last one
        ragged: a chunk that the predicate leaves empty would never initialise its partial result.
        The chunk loop goes outside the rows: fused with them, a row is then the fused index modulo
        the static row count, never modulo the chunk count (0 for an empty symbolic size)."""
        loops = sch.get_loops(block)
        k = fuse(sch, loops[n_rows:])
        extent = get_extent(sch, k)
        want = max(1, min(self.parts, extent // 2048)) if isinstance(extent, int) else self.parts
        parts = pow2_divisor(extent, want)
        if isinstance(extent, int) and extent and pow2_divisor(extent // parts, 16) < 16:
            # odd chunks (200,000 in 64 chunks of 3125) are reduced one scalar at a time: fewer
            # chunks whose size is a multiple of 16 (25 of 8000) keep vectors of partial results
            even = [d for d in range(want, min(want, 8) - 1, -1) if extent % d == 0 and (extent // d) % 16 == 0]
            parts = even[0] if even else parts
        if parts >= min(want, 8):
            kp, _ = sch.split(k, [parts, None])
        else:
            kp, _ = sch.split(k, [None, 2048 if isinstance(extent, int) else 4096])
        rf = sch.rfactor(kp, factor_axis=0)
        *rows, chunk, _ = sch.get_loops(rf)
        if rows:
            sch.reorder(chunk, *rows)
        return rf

    def _columns(self, sch, block, n_rows, lanes):
        """Reduce over a leading or middle axis: the kept elements in parallel, vectors of contiguous ones."""
        loops = sch.get_loops(block)
        kept, red = fuse(sch, loops[:n_rows]), fuse(sch, loops[n_rows:])
        extent = get_extent(sch, kept)
        chunk = pow2_divisor(extent, 4 * lanes)
        if chunk < lanes and (not isinstance(extent, int) or extent >= 8 * lanes):
            # a symbolic or odd row of many columns: chunks of 4 * lanes columns, the last ragged, each
            # reduced a row of contiguous columns at a time (LLVM vectorises that loop); a parallel
            # loop over single columns read each column with a stride of a row (13 ms for 4096x1024)
            outer, inner = sch.split(kept, [None, 4 * lanes])
            sch.reorder(outer, red, inner)
            self._parallel(sch, outer)
            sch.decompose_reduction(block, red)
            return True
        if chunk < lanes:
            self._parallel(sch, kept)
            sch.decompose_reduction(block, red)  # initialised even when nothing is reduced
            return True
        outer, inner = sch.split(kept, [None, chunk])
        sch.reorder(outer, red, inner)
        self._parallel(sch, outer)
        self._vectorize(sch, sch.split(inner, [None, lanes])[1])
        sch.decompose_reduction(block, red)
        return True

    def _vector_row(self, sch, loop, lanes):
        """An element-wise block's row vectorised: whole vectors where a power of two of a register
        divides it, else (odd, prime, symbolic) split raggedly, `with_tails` cutting the last
        vector off; a row shorter than two registers stays a loop for LLVM."""
        extent = get_extent(sch, loop)
        vector = pow2_divisor(extent, lanes)
        if vector < lanes and (not isinstance(extent, int) or extent >= 2 * lanes):
            vector = lanes
        if vector > 1:
            self._vectorize(sch, sch.split(loop, [None, vector])[1])

    # several blocks over the same rows ---------------------------------------------------------------
    def _across(self, sch, blocks, reductions, n_rows, lanes) -> bool:
        """Whether each vector should hold `lanes` rows (`_rows`): every reduced row is too short for
        vectors of its own (shorter than two registers: rows of 7 were reduced a scalar at a time,
        with a branch per NaN-aware max) and there are rows enough to fill a vector."""
        if not self.vectors or any(len(sch.get_loops(b)) < n_rows + 1 or is_copy(sch, b, self.copies)
                                   for b in blocks):
            return False
        for b in reductions:
            loops = sch.get_loops(b)
            if len(sch.get(b).writes) > 1:  # (index, value) pairs: left to their own schedule
                return False
            width = static_product(sch, loops[n_rows:])
            if width is None or width >= 2 * lanes:
                return False
        rows = static_product(sch, sch.get_loops(reductions[0])[:n_rows])
        return rows is None or rows >= lanes

    def _rows_across(self, sch, blocks, n_rows, lanes):
        """Rows too short for vectors (`_across`): steps of `lanes` rows in parallel, every block
        computed per step with the rows as its vector lanes (`_lanes_are_rows`)."""
        for b in blocks[:-1]:
            _rows_last(sch, b, n_rows)
        if n_rows > 1:  # one row axis: a step of rows is then one range of it, none recomputed
            for b in blocks:
                _flatten_rows(sch, b, n_rows)
        step, _ = sch.split(sch.get_loops(blocks[-1])[0], [None, lanes])
        self._parallel(sch, step)
        for b in reversed(blocks[:-1]):
            sch.compute_at(b, step, preserve_unit_loops=True)
        return _lanes_are_rows(sch, blocks)

    def _rows(self, sch, blocks, reductions, lanes):
        last = blocks[-1]
        n_rows = min(len(sch.get_loops(b)) - reduce_count(sch, b) for b in reductions)
        if n_rows < 1 or any(len(sch.get_loops(b)) - reduce_count(sch, b) != n_rows for b in reductions):
            return decline("reductions over different rows")
        if self._across(sch, blocks, reductions, n_rows, lanes):
            return self._rows_across(sch, blocks, n_rows, lanes)
        order, rfs = [], []
        for b in blocks[:-1]:          # 1. rfactor while each reduction still owns its loop nest
            if reduce_count(sch, b):
                _, rf = _rfactor_rows(sch, b, n_rows, self.accum, lanes)
                if rf is not None:
                    order.append(rf)
                    rfs.append((rf, _ragged(sch, rf)))
            order.append(b)
        loops = sch.get_loops(last)    # 2. the last block's rows in parallel, its row vectorised
        def units(nest):
            return len(nest) >= n_rows and all(isinstance(e, int) and e == 1 for e in (get_extent(sch, loop) for loop in nest[:n_rows]))

        if units(sch.get_loops(reductions[0])) and not units(loops):
            # one row, whose unit axis the element-wise blocks lost to normalisation: their first loop
            # is no row (taken for one, every block ran once per element); `_passes` takes it
            return decline("one row, whose unit axis the element-wise blocks lost")
        if reduce_count(sch, last):    # 2a. a per-row result last (row_partials.py): rfactored as the others
            row, rf = _rfactor_rows(sch, last, n_rows, self.accum, lanes)
            if rf is not None:
                order.append(rf)
                rfs.append((rf, _ragged(sch, rf)))
                row = sch.get_loops(last)[0]  # its fold of the partials, after the row's other blocks
            inner = []
        else:
            row, inner = fuse(sch, loops[:n_rows]), loops[n_rows:]
        copies = [b for b in order if is_copy(sch, b, self.copies)]
        if copies:  # 2b. (an output block is never computed at a loop: its row loop joins the last's)
            row = sch.merge(*[fuse(sch, sch.get_loops(b)[:n_rows]) for b in copies], row)
        if inner:
            self._vector_row(sch, fuse(sch, inner), lanes)
        self._parallel(sch, row)
        for b in reversed(order):      # 3. every other block per row, consumers first
            if not is_copy(sch, b, self.copies):
                sch.compute_at(b, row, preserve_unit_loops=True)
        for rf, tail in rfs:           # 4. the partial-result axis innermost, one vector register wide
            ki, ko = _rfactor_loops(sch, rf)
            under = sch.get_loops(rf)[1:]  # below the row: ki, ko and unit loops of the other axes
            sch.reorder(*[loop for loop in under if not sch.get(loop).same_as(sch.get(ki))
                          and not sch.get(loop).same_as(sch.get(ko))], ko, ki)
            self._vectorize(sch, ki)
        for b in blocks[:-1]:          # 5. element-wise blocks that could not be inlined
            if not reduce_count(sch, b) and len(sch.get_loops(b)) > 1:
                self._vector_row(sch, sch.get_loops(b)[-1], lanes)
        for rf, _ in rfs:              # 6. the partials' initialisation apart from their update
            sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
        for rf, tail in rfs:           # 7. last (no primitive checks the block after): ragged rows' tails
            if tail is not None:
                _restore_tail(sch, rf, *tail)
        return True


def _rows_last(sch, block, n_rows):
    """The buffer a block writes for the next blocks (rows leading, `_across`) with its rows as one
    axis, so that computing a step of rows at a time (`compute_at`) covers just those rows, not the
    box around them; an element-wise block's with that axis last, so that a step's rows, the vector
    lanes, are contiguous (a reduction's results are already: one per row)."""
    shape = sch.get(block).writes[0].source.shape
    elementwise = not reduce_count(sch, block)

    def layout(*axes):  # (the buffer's own extents: a bijection whatever its axes are)
        row = _row_of(axes, shape, n_rows)
        return [*axes[n_rows:], row] if elementwise else [row, *axes[n_rows:]]
    sch.transform_layout(block, ("write", 0), tirx.IndexMap.from_func(layout, ndim=len(shape)))


def _row_of(axes, extents, n_rows):
    """The row number of the leading `n_rows` of `axes` (of those `extents`), row-major."""
    row = axes[0]
    for axis, extent in zip(axes[1:n_rows], extents[1:n_rows]):
        row = row * extent + axis
    return row


def _flatten_rows(sch, block, n_rows):
    """A block's leading `n_rows` iteration axes made one (rows of a (401, 49, 7) input: 19,649)."""
    iters = sch.get(block).iter_vars
    extents = [iv.dom.extent for iv in iters[:n_rows]]

    def fused(*axes):
        return [_row_of(axes, extents, n_rows), *axes[n_rows:]]
    sch.transform_block_layout(block, tirx.IndexMap.from_func(fused, ndim=len(iters)))


def _lanes_are_rows(sch, blocks) -> bool:
    """Each block computed at a step of `lanes` rows (`_rows` across rows) as loops over its row's
    elements around a vectorised loop over the rows: a reduction keeps each row's order (one lane
    each); intermediate results are whole vectors (`_rows_last`), and only the input and output
    rows are read and written a lane at a time (stride: the row). The last vector's rows past the
    end: `_clamp_rows`."""
    for b in blocks:
        lane, *elements = sch.get_loops(b)[1:]
        sch.reorder(*elements, lane)
        sch.vectorize(lane)
        sch.annotate(lane, CLAMPED, 1)
        if reduce_count(sch, b):  # (after vectorising: the update alone is no reduction block to TVM)
            init = sch.get_loops(sch.decompose_reduction(b, elements[0]))[-1]
            sch.vectorize(init)
            sch.annotate(init, CLAMPED, 1)
    return True


def _rows_line_up(sch, blocks, reductions) -> bool:
    """Whether every block reads each reduction's results at its own leading row loops alone (as
    many as the reductions keep), so that computing every block per row (`_rows`) computes each
    result once. A norm over axes 0 and 2 scaling a (256, 384, 3) input keeps its results along the
    consumer's second loop: per row of the first, each row would recompute all 384 of them (60 ms
    for 0.3 ms of work)."""
    n_rows = min(len(sch.get_loops(b)) - reduce_count(sch, b) for b in reductions)
    results = [w.source for r in reductions for w in sch.get(r).writes]
    for b in blocks:
        loops = sch.get_loops(b)
        if not loops:
            continue
        realize = sch.get(loops[-1]).body
        if not isinstance(realize, s_tir.SBlockRealize):
            return False
        rows = {sch.get(loop).loop_var for loop in loops[:n_rows]}
        on_rows = {iv.var for iv, value in zip(realize.block.iter_vars, realize.iter_values)
                   if set(tirx.analysis.undefined_vars(value)) <= rows}
        written = [w.source for w in realize.block.writes]
        for region in realize.block.reads:
            if not any(region.source.same_as(r) for r in results) or any(region.source.same_as(w) for w in written):
                continue
            if any(not set(tirx.analysis.undefined_vars(axis.min)) <= on_rows for axis in region.region):
                return False
    return True


def _rfactor_rows(sch, block, n_rows, accum, lanes):
    """A reduction block of loops [rows..., reduced...] as (row loop, rfactor block) (`_split_row`);
    (row loop, None) for a row too short for vectors, or for (index, value) pairs, each row reduced
    in order (rfactor into vectors mixed up their NaN-aware combiner: see `_pairs`)."""
    loops = sch.get_loops(block)
    row = fuse(sch, loops[:n_rows])
    long_math = calls_long_math(sch.get(block).body)
    if len(sch.get(block).writes) > 1 or _split_row(sch, fuse(sch, loops[n_rows:]), accum, lanes, long_math) is None:
        return row, None
    rf = sch.rfactor(sch.get_loops(block)[-1], factor_axis=-1)
    return sch.get_loops(rf)[0], rf


def _ragged(sch, rf):
    """For an rfactor block whose split was ragged (it has a predicate): (its predicate, its block
    variables, their bindings), for `_restore_tail`; else None."""
    realize = sch.get(sch.get_loops(rf)[-1]).body
    if is_int(realize.predicate, 1):
        return None
    return realize.predicate, [iv.var for iv in realize.block.iter_vars], list(realize.iter_values)


def _restore_tail(sch, rf, predicate, old_vars, old_values):
    """Put back the predicate of a ragged rfactor block (`k_0 * partials + k_1 < row`), which
    `compute_at` drops (TVM 0.27), leaving loops that read past the row. The predicate is rewritten
    from the old loop variables to the block's iteration variables and then to its new bindings."""
    ki = sch.get_loops(rf)[-1]
    loop = sch.get(ki)
    realize = loop.body
    # each old binding of the row's steps is one loop variable: it becomes the same block
    # variable's new binding
    new_of = {var: value for var, value in zip([iv.var for iv in realize.block.iter_vars], realize.iter_values)}
    mapping = {value: new_of[var] for var, value in zip(old_vars, old_values) if isinstance(value, tirx.Var)}
    predicate = substituted(predicate, mapping)
    new = s_tir.SBlockRealize(list(realize.iter_values), predicate, realize.block)
    body = tvm_ffi.structural_map(loop, (s_tir.SBlockRealize, lambda r: new if r.same_as(realize) else r))
    sch.state.replace(sch.get_sref(ki), body, {realize.block: realize.block})


def _split_row(sch, k, accum, lanes, calls_math: bool = False):
    """The reduced loop `k` of a row split by up to `accum` partial results; the inner loop, or None
    where the row is shorter than two vector registers. A row with no power of two of a vector
    register dividing it (odd, prime, symbolic) is split raggedly (a predicate on the last step),
    which `with_tails` later cuts off: the steps before it are whole vectors, only the tail scalar.
    `calls_math`: the step computes an exp or another long call, which runs on the partials' lanes."""
    extent = get_extent(sch, k)
    # at least 16 steps a row: each row ends folding its partials one by one, which for short rows
    # cost more than the steps saved (a 32x256 softmax on one Zen 5 core: 5.4 us with 64 partials,
    # 4.5 with 16). A short row's steps and its fold are each a chain of dependent operations: about
    # the square root of the row in partials makes both short (a float16 row of 64: 8 steps of 8 and
    # a fold of 8, against 2 steps of 32, a register of halves, and a fold of 32). A step that calls
    # math runs it a register at a time: half a register is twice the math (a log-softmax's exp-sum
    # over rows of 64 on one thread: 4.0 ms in 8 lanes, a softmax's kept exp in 16 lanes 2.0)
    fold = lanes if calls_math else min(lanes, math.isqrt(extent)) if isinstance(extent, int) else lanes
    want = 1 << (min(accum, max(extent // 16, fold, 1)).bit_length() - 1) if isinstance(extent, int) else accum
    vector = pow2_divisor(extent, want)
    if vector >= min(want, lanes) and vector >= 4:
        return sch.split(k, [None, vector])[1]
    if isinstance(extent, int) and extent < 2 * lanes or want < 4:
        return None
    # more partials than a vector register only where the row is long enough that the scalar tail
    # (up to that many steps) is small
    vector = want if not isinstance(extent, int) or extent >= 16 * want else lanes
    return sch.split(k, [None, vector])[1]


def _rfactor_loops(sch, rf):
    """(ki, ko) of an rfactor block after `compute_at`: the loop of its partial-result axis (the
    last index of the buffer it writes) and its reduction loop. Found by the block's bindings: with
    rows of several axes (a 4-D causal softmax) the unit loops of the other axes sit between them."""
    loops = sch.get_loops(rf)
    realize = sch.get(loops[-1]).body
    block = realize.block
    partial = block.writes[0].region[-1].min

    def loop_of(value):
        used = tirx.analysis.undefined_vars(value)
        return next(loop for loop in reversed(loops) if any(sch.get(loop).loop_var.same_as(v) for v in used))

    ki = loop_of(next(value for iv, value in zip(block.iter_vars, realize.iter_values) if iv.var.same_as(partial)))
    ko = loop_of(next(value for iv, value in zip(block.iter_vars, realize.iter_values)
                      if iv.iter_type == tirx.IterVar.CommReduce))
    return ki, ko


def _clamp_rows(lane):
    """A vectorised loop of rows (`_rows` across rows) without the predicate of its ragged last
    vector (rows past the end): there its lanes past the end take the last row again, rather than
    the vectoriser running every vector a lane at a time to test it. They store the last row's own
    values once more, on the same thread. The bound is `base + lane < rows` on its blocks."""
    var = lane.loop_var
    bounds = [t for realize in find_all(lane.body, s_tir.SBlockRealize) for t in conjuncts(realize.predicate)
              if uses(t, var)]
    clamp = {}
    if bounds:
        test = bounds[0]
        coeffs = detect_linear_equation(test.a, [var]) if isinstance(test, tirx.LT) else []
        if len(coeffs) != 2 or not is_int(coeffs[0], 1) or uses(test.b, var):
            raise ValueError(f"not a bound on rows: {test}")
        clamp = {var: tirx.min(var, test.b - 1 - coeffs[1])}

    def realize(r):
        kept = [t for t in conjuncts(r.predicate) if not uses(t, var)]
        predicate = kept[0] if kept else tirx.const(True, "bool")
        for t in kept[1:]:
            predicate = tirx.And(predicate, t)
        return s_tir.SBlockRealize([substituted(v, clamp) for v in r.iter_values], predicate, r.block)
    body = tvm_ffi.structural_map(lane.body, (s_tir.SBlockRealize, realize))
    annotations = {k: v for k, v in lane.annotations.items() if k != CLAMPED}
    return tirx.For(var, lane.min, lane.extent, lane.kind, body, lane.thread_binding, annotations)
