"""CPU rule CPUElementwise: injective kernels inlined into one loop nest, fused, vectorised (several
registers a step for long-latency math) and parallel."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import calls_long_math, find_all, fuse, is_buffer, one_loop, only_output, static_product, uses
from .cpu_rule import CPURule, MIN_PARALLEL_ELEMENTWISE, pow2_divisor, vector_lanes, vectorizable
from .tails import with_tails
from .inlining import inline
from .lanes import IF_THEN_ELSE, flat_offsets, uniform_lanes


# A vector through an exp, erf or tanh polynomial and a division, or through half-precision rounding
# (float16: a conversion there and back per operation), is a long chain of dependent instructions: one
# vector per loop step leaves the core waiting on it. Four independent vectors per step overlap
# (one Zen 5 core: float16 sigmoid((a+b)*a-b) 0.53 -> 0.31 ns per element, float16 GELU-tanh
# 0.67 -> 0.40); a copy or an add is bound by memory and keeps one register.
LONG_CHAIN_VECTORS = 4


def _vectors_per_step(sch) -> int:
    """Registers of lanes per vectorised step: LONG_CHAIN_VECTORS for a kernel of long-latency math
    calls or of float16 / bfloat16 buffers, else one."""
    func = sch.mod["main"]
    if any(str(tvm.DataType(p.ty.dtype)) in ("float16", "bfloat16") for p in func.params if is_buffer(p)):
        return LONG_CHAIN_VECTORS
    return LONG_CHAIN_VECTORS if calls_long_math(func.body) else 1


# An odd row (`_ragged`) longer than this is cut into chunks of it that run in parallel:
# three rows of 50,257 are then 39 parallel steps, not 3. A multiple of every vector's lanes.
CHUNK = 4096


class CPUElementwise(CPURule):
    """Injective kernels: inline every intermediate (one loop nest, no temporary buffers), fuse the
    loops, vectorise the innermost `lanes` (a register, or several for a long chain: `_vectors_per_step`)
    and run the rest in parallel. An odd size is whole vectors and a scalar tail (`_ragged`); a symbolic
    one is only parallelised (LLVM's loop vectorizer then takes each thread's range)."""

    def apply(self, func, target, tunable):
        sch = super().apply(func, target, tunable)
        return with_tails(sch) if sch is not None else None  # `_ragged`'s last vectors cut off

    def schedule(self, sch, infos, target):
        if not all(info.is_injective() for info in infos):
            return False
        register = vector_lanes(sch, target)
        lanes = register * _vectors_per_step(sch) if vectorizable(sch) else 1
        infos = inline(sch, infos, shared=False)
        if _per_vector(sch, infos, lanes):
            return True
        # several outputs (AdamW's p, m and v): one loop nest, each element's inputs read once
        merged = one_loop(sch, [info.block_rv for info in infos]) if len(infos) > 1 else None
        nests = [(None, [merged])] if merged is not None else [(info.block_rv, sch.get_loops(info.block_rv))
                                                               for info in infos]
        for block, loops in nests:
            if not loops:
                continue  # a 0-d kernel: nothing to spread
            if block is not None and _ragged(sch, block, loops, lanes, register):
                continue
            most = lanes if block is None else uniform_lanes(sch, block, loops[-1], lanes)
            extent = static_product(sch, loops)  # None where symbolic
            row = pow2_divisor(get_extent(sch, loops[-1]), most)
            if row > 1 and (row >= pow2_divisor(extent, most) or row >= register):
                # the lanes split off the row first: a value per row (a scale, a row's statistic) is
                # one scalar per vector, not a lane-by-lane gather of the fused index's `// width`;
                # and a symbolic number of rows still gets vectors. Where a register's lanes divide
                # the row, more lanes off the fused loops would straddle rows, whose indices TVM
                # can't simplify to one run: a load and a store per lane (a float16 add over rows of
                # 96 in vectors of 64: 6.1 ms, eager 1.1)
                outer, inner = sch.split(loops[-1], [None, row])
                outer = fuse(sch, [*loops[:-1], outer])
                sch.vectorize(inner)
            elif block is not None and _rows_apart(sch, block, loops, most):
                outer = fuse(sch, loops[:-1])  # each row a loop of its own, which LLVM vectorises
            else:
                outer = fuse(sch, loops)
                vector = pow2_divisor(extent, most)
                if vector > 1:
                    outer, inner = sch.split(outer, [None, vector])
                    sch.vectorize(inner)
            if extent is None or extent >= MIN_PARALLEL_ELEMENTWISE:
                sch.parallel(outer)
        return True


def _ragged(sch, block, loops, lanes: int, register: int) -> bool:
    """Schedule a block of an odd static size (no power of two of a register divides it) as whole
    vectors of `lanes` and a scalar tail: its loops fused where every read is at the output's flat
    index, else each row on its own (in chunks of CHUNK where long), split raggedly; `with_tails` then
    cuts the last, partial vector off. Left as a loop, LLVM vectorised it but turned sin and cos
    into a libm call per lane (cos over 3 x 50,257: 8x the time of 3 x 50,256). False where whole
    vectors exist, the size is small, or an `if_then_else` on the row's index (a concat) would differ
    between the lanes."""
    extents = [get_extent(sch, loop) for loop in loops]
    total = static_product(sch, loops)
    # a symbolic size keeps LLVM's vectors: a divisor of the fused or chunked index that is 0 for an
    # empty size was computed with no step to run (an integer division by zero at n = 0)
    if lanes < register or total is None or total < 2 * lanes:
        return False
    if max(pow2_divisor(extents[-1], lanes), pow2_divisor(total, lanes)) >= register:
        return False
    if _branches_along(sch, block, loops[-1]):
        return False
    offsets = flat_offsets(sch.get(block), [sch.get(loop).extent for loop in loops], total)
    if len(loops) == 1 or offsets is not None and all(o is not None for o in offsets.values()):
        outer, inner = sch.split(fuse(sch, loops), [None, lanes])
    else:
        *rows, row = loops
        if extents[-1] >= 2 * CHUNK:
            chunk, row = sch.split(row, [None, CHUNK])
            rows.append(chunk)
        outer = fuse(sch, rows)
        inner = sch.split(row, [None, lanes])[1]
    sch.vectorize(inner)
    if total >= MIN_PARALLEL_ELEMENTWISE:
        sch.parallel(outer)
    return True


def _branches_along(sch, block, loop) -> bool:
    """Whether an `if_then_else` of the block tests an index that moves along `loop` (a concat's pick
    of a piece, which a vector straddling two pieces runs one lane at a time)."""
    realize = sch.get(loop).body
    if not isinstance(realize, s_tir.SBlockRealize):
        return True
    var = sch.get(loop).loop_var
    moving = [iv.var for iv, value in zip(realize.block.iter_vars, realize.iter_values) if uses(value, var)]
    return any(call.op.same_as(IF_THEN_ELSE) and any(uses(call.args[0], v) for v in moving)
               for call in find_all(realize.block.body, tvm.ir.Call))


def _rows_apart(sch, block, loops, lanes: int) -> bool:
    """Whether an odd row (no whole vectors) is better left a loop per row: it is long enough for
    vectors, and some read is not at the flattened loop's own index (a bias along the row, a slice
    of a wider row), which fused would be a lane-by-lane gather of `// width` and `% width`
    (`relu(x + b)` over 333-wide rows: 0.2x torch.compile)."""
    extents = [sch.get(loop).extent for loop in loops]
    if len(loops) < 2 or not isinstance(extents[-1], tirx.IntImm) or int(extents[-1]) < 2 * lanes:
        return False
    total = extents[0]
    for extent in extents[1:]:
        total = total * extent
    offsets = flat_offsets(sch.get(block), extents, total)
    return offsets is None or any(offset is None for offset in offsets.values())


def _per_vector(sch, infos, lanes: int) -> bool:
    """A kernel of one result whose intermediates `inline` kept (a chain too deep to inline, a value
    several blocks read): each intermediate computed per vector of the result, inside its one parallel
    loop, into a buffer of `lanes` elements, instead of a full-size buffer written and read back by a
    loop of its own. Each value is computed once, where inlining would repeat it in every reader."""
    # one result: several merged into one loop (sch.merge) lost a kept buffer's allocation after
    # compute_at (ill-formed TIR); those kernels keep a loop per block (still each value once)
    out = only_output(sch, infos)
    loops = sch.get_loops(out) if out is not None else []
    if not loops:
        return False
    extent = static_product(sch, loops)
    # the vectors split off the innermost axis: a kept block's part of a step is then one run of its
    # row (split off the fused index, a step could straddle two rows: a loop of no constant extent)
    row = get_extent(sch, loops[-1])
    vector = pow2_divisor(row, lanes)
    if vector * LONG_CHAIN_VECTORS < lanes:
        # an odd row (a prime; 2 x an odd one gave p52 2-lane vectors) keeps a loop per block, which
        # LLVM vectorises: split unevenly, TVM 0.27's compute_at drops the last step's predicate in
        # the kept blocks (wrong lanes near a row's end, seen in the generated chains' test)
        return False
    outer, inner = sch.split(loops[-1], [None, vector])
    outer = fuse(sch, [*loops[:-1], outer])
    for info in reversed(infos[:-1]):  # consumers first: each producer then goes under its consumer
        sch.compute_at(info.block_rv, outer, preserve_unit_loops=True)
        sch.vectorize(fuse(sch, sch.get_loops(info.block_rv)[1:]))
    sch.vectorize(inner)
    if extent >= MIN_PARALLEL_ELEMENTWISE:
        sch.parallel(outer)
    return True
