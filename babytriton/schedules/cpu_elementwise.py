"""CPU rule CPUElementwise: injective kernels inlined into one loop nest, fused, vectorised (several
registers a step for long-latency math) and parallel."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import block_value, calls_long_math, fuse, is_buffer, one_loop, only_output, static_product
from .cpu_rule import CPURule, MIN_PARALLEL_ELEMENTWISE, pow2_divisor, vector_lanes, vectorizable
from .inlining import LINEAR_CALLS, inline
from .lanes import flat_offsets, uniform_lanes


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


class CPUElementwise(CPURule):
    """Injective kernels: inline every intermediate (one loop nest, no temporary buffers), fuse the
    loops, vectorise the innermost `lanes` (a register, or several for a long chain: `_vectors_per_step`)
    and run the rest in parallel. An odd or symbolic size is only parallelised: LLVM's loop vectorizer
    then takes each thread's range."""

    def schedule(self, sch, infos, target):
        if not all(info.is_injective() for info in infos):
            return False
        lanes = vector_lanes(sch, target) * _vectors_per_step(sch) if vectorizable(sch) else 1
        infos = inline(sch, infos)
        if _into_one_output(sch, infos, lanes):
            return True
        # several outputs (AdamW's p, m and v): one loop nest, each element's inputs read once
        merged = one_loop(sch, [info.block_rv for info in infos]) if len(infos) > 1 else None
        nests = [(None, [merged])] if merged is not None else [(info.block_rv, sch.get_loops(info.block_rv))
                                                               for info in infos]
        for block, loops in nests:
            if not loops:
                continue  # a 0-d kernel: nothing to spread
            most = lanes if block is None else uniform_lanes(sch, block, loops[-1], lanes)
            extent = static_product(sch, loops)  # None where symbolic
            row = pow2_divisor(get_extent(sch, loops[-1]), most)
            if row > 1 and row >= pow2_divisor(extent, most):
                # the lanes split off the row first: a value per row (a scale, a row's statistic) is
                # one scalar per vector, not a lane-by-lane gather of the fused index's `// width`;
                # and a symbolic number of rows still gets vectors
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


def _shared_calls(sch, infos) -> bool:
    """Whether two blocks compute the same math call (tanh of the same expression of the same element):
    computed per vector in one loop body, LLVM computes it once; in loops of their own, once per
    block. Without such a call, separate streaming loops are as fast (a tanh chain's own values)."""
    seen = set()
    for info in infos:
        value = block_value(sch, info.block_rv)
        if value is None:
            continue
        calls = []
        tvm_ffi.structural_walk(value, (tvm.ir.expr.Call, calls.append))
        mine = {tvm_ffi.structural_hash(c, map_free_vars=True) for c in calls if isinstance(c.op, tvm.ir.Op)
                and c.op.name not in LINEAR_CALLS and c.op.name != "tirx.reinterpret"}
        if mine & seen:
            return True
        seen |= mine
    return False


def _into_one_output(sch, infos, lanes: int) -> bool:
    """A kernel of one output block and intermediates that `inline` kept (a backward's chain of tanh
    derivatives): each intermediate computed per vector of the output, inside its parallel loop, into
    a buffer of `lanes` elements, instead of a full-size buffer written and read back by a loop of its
    own. Intermediates keep each value computed once, which inlining would repeat per use."""
    out = only_output(sch, infos)
    if out is None or not _shared_calls(sch, infos):
        return False
    fused = fuse(sch, sch.get_loops(out))
    extent = get_extent(sch, fused)
    vector = pow2_divisor(extent, lanes)
    if vector <= 1 or extent < MIN_PARALLEL_ELEMENTWISE:
        return False
    outer, inner = sch.split(fused, [None, vector])
    for info in reversed(infos[:-1]):  # consumers first: each producer then goes under its consumer
        sch.compute_at(info.block_rv, outer, preserve_unit_loops=True)
        sch.vectorize(fuse(sch, sch.get_loops(info.block_rv)[1:]))
    sch.vectorize(inner)
    sch.parallel(outer)
    return True
