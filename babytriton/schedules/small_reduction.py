"""GPU rule SmallReduction: reductions over a few elements of outer or middle axes (a softmax over an
axis of 2, the mean of 3 channels), computed by each thread that needs them, one thread an element."""
from __future__ import annotations

from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

from .analysis import contiguous_reduction, fuse, in_registers, normalized, reduce_count, static_product
from .inlining import GPU_CALL_DEPTH, inline

MAX_EXTENT = 8  # elements a thread reduces alone; FuseRowwise joins several such reductions in a kernel


class SmallReduction(GPUScheduleRule):
    """Every reduction of the kernel sums at most `max_extent` elements (static) along axes other than
    its inputs' contiguous one: `x.amax(1)` of a (97271, 2, 100) x, then `exp(x - m)`. OuterReduction
    gave such a kernel a block of threads across the kept columns and along the two reduced rows, in two
    launches, 74 + 27 us on an H200 where torch.compile's one pointwise kernel took 40. Here the last
    block runs one thread an element, coalesced along the contiguous axis, and each reduction it reads
    is computed in that thread, in registers (compute_at), its few loads hitting the cache the
    neighbouring threads filled: no cross-thread step, no second launch. A kernel without blocks after
    its reductions runs a thread a result."""

    def __init__(self, max_extent: int = MAX_EXTENT, threads: int = 256):
        self.max_extent, self.threads = max_extent, threads

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        reductions = [b for b in blocks if reduce_count(sch, b)]
        if not reductions or any(not self._small(sch, red) for red in reductions):
            return None
        last = blocks[-1]
        loops = sch.get_loops(last)
        spatial = loops[:len(loops) - reduce_count(sch, last)]
        if not spatial:
            return None
        grid, lane = sch.split(fuse(sch, spatial), [None, self.threads])
        sch.bind(grid, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        for block in reversed(blocks[:-1]):
            sch.compute_at(block, lane, preserve_unit_loops=True)
            in_registers(sch, block)   # the thread's own value
        return sch

    def _small(self, sch, red) -> bool:
        """Whether `red` reduces at most `max_extent` elements (static), not along its input's
        contiguous axis (rows of a few elements are InnerReduction's: a thread would stride)."""
        loops = sch.get_loops(red)
        extent = static_product(sch, loops[len(loops) - reduce_count(sch, red):])
        return extent is not None and extent <= self.max_extent and not contiguous_reduction(sch, red)
