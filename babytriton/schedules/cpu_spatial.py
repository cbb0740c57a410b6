"""CPU rule CPUSpatial, the last one: any kernel the others declined gets its leading spatial loops
in parallel (and contiguous element-wise loops vectorised), so no large kernel runs on one thread."""
from __future__ import annotations

from .analysis import fuse, static_product
from .cpu_rule import CPURule, MIN_PARALLEL, vector_lanes, vectorizable
from .lanes import contiguous_lanes
from .reasons import decline


class CPUSpatial(CPURule):
    """The last CPU rule, for any kernel the others decline (a half argmax, a float64 product): each
    block's leading spatial loops fused and in parallel, and an element-wise block's innermost loop
    vectorised where its accesses are contiguous, so that no kernel runs its work on one thread."""

    def schedule(self, sch, infos, target):
        lanes = vector_lanes(sch, target) if vectorizable(sch) else 1
        spread = False
        for info in infos:
            kinds = info.dom_kind()
            n_spatial = len(kinds) - len(kinds.lstrip("S"))
            loops = sch.get_loops(info.block_rv)
            if not n_spatial or len(loops) != len(kinds):
                decline("no spatial loop to run in parallel")  # the first block's reason, if none spreads
                continue
            work = static_product(sch, loops)
            if work is not None and work < MIN_PARALLEL:
                decline(f"{work} iterations: fewer than MIN_PARALLEL ({MIN_PARALLEL}), a launch costs more")
                continue
            if n_spatial == len(loops) and n_spatial > 1 and lanes > 1 and contiguous_lanes(sch, loops[-1], lanes):
                sch.vectorize(sch.split(loops[-1], [None, lanes])[1])
                loops = loops[:-1]
                n_spatial -= 1
            sch.parallel(fuse(sch, loops[:n_spatial]))
            spread = True
        return spread
