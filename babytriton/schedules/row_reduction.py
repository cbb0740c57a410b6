"""GPU rule RowReduction: a reduction over the innermost, contiguous axis of a static width that
256 threads x 4 loads divide: one block per row, a warp-shuffle reduction across its threads."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import normalized
from .inlining import GPU_CALL_DEPTH, inline
from .reasons import decline


def _single_block(rule: GPUScheduleRule, func, target):
    """A schedule of `func` and its one block after inlining, or (None, None) when the rule can't apply."""
    sch, infos = normalized(rule, func, target)
    if sch is None:
        return None, None
    infos = inline(sch, infos, GPU_CALL_DEPTH)
    return (sch, infos[0]) if len(infos) == 1 else (None, None)


class RowReduction(GPUScheduleRule):
    """A reduction over the innermost, contiguous axis (row sum, row max): one block of `threads`
    per row, each thread summing `unroll` coalesced loads per step, then a warp-shuffle reduction
    over 256 partial sums. Dlight's Reduction uses 1024 threads of 4 loads and a 1024-wide tree."""

    def __init__(self, threads: int = 256, unroll: int = 4):
        self.threads = threads
        self.unroll = unroll

    def apply(self, func, target, _tunable):
        sch, info = _single_block(self, func, target)
        if sch is None or not info.is_reduction():
            return None
        dom = info.dom_kind()
        if len(dom) < 2 or not dom.endswith("R") or dom.count("R") != 1:
            return None
        block = info.block_rv
        if len(sch.get(block).writes) != 1:  # argmax's (index, value) pairs: Dlight's GeneralReduction
            return decline("two results per row (an argmax's index and value)")
        if not _reduces_innermost_axis(sch.get(block)):
            return decline("the reduced axis is not every input's innermost (a column reduction)")
        *spatial, r = sch.get_loops(block)
        extent = sch.get(r).extent
        step = self.threads * self.unroll
        if not isinstance(extent, tirx.IntImm):
            return decline("a symbolic row width")
        if int(extent) % step:
            return decline(f"row width {int(extent)}: not a multiple of {step}")
        row = sch.fuse(*spatial)
        _, inner, lane = sch.split(r, [None, self.unroll, self.threads])
        partial = sch.rfactor(lane, 0)  # one partial sum per thread, in a register
        row, outer, inner, lane = sch.get_loops(partial)
        sch.reorder(row, lane, outer, inner)
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        sch.set_scope(partial, 0, "local")
        sch.decompose_reduction(partial, outer)
        sch.unroll(inner)
        sch.reverse_compute_at(block, row, preserve_unit_loops=True)
        _, lane, *rest = sch.get_loops(block)
        if rest:  # the cross-thread reduction needs the thread loop innermost
            sch.reorder(*rest, lane)
        sch.bind(lane, "threadIdx.x")
        return sch


def _reduces_innermost_axis(block) -> bool:
    """Whether every buffer the reduction reads is indexed by the reduction variable last (coalesced)."""
    reduce_vars = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    if len(reduce_vars) != 1:
        return False
    var = reduce_vars[0]
    written = [region.source for region in block.writes]
    reads = [region for region in block.reads if not any(region.source.same_as(w) for w in written)]
    return bool(reads) and all(
        any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(region.region[-1].min)) for region in reads)
