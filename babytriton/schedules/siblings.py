"""Reductions of one kernel that can run in one loop nest (`siblings`): over the same loops, in the
same layout, none reading another's result (`x.mean(1), x.amax(1)`, joined by FuseMultiOutput).
OuterReduction and CPUOuterReduction cut them alike and read their input once for all."""
from __future__ import annotations

import tvm_ffi
from tvm import s_tir

from .analysis import reduce_count


def siblings(sch, reductions: list, layouts: list) -> list[list]:
    """The reduction blocks in sets, in block order, each set's blocks over equal loops and layouts
    (`columns`) and independent of each other: each set can be one loop nest."""
    sets, upstream = [], {}
    for block, layout in zip(reductions, layouts):
        upstream[name(sch, block)] = _producers(sch, block)
        for group in sets:
            first, first_layout = group[0]
            if first_layout == layout and _same_loops(sch, first, block) and not any(
                    name(sch, b) in upstream[name(sch, block)] or name(sch, block) in upstream[name(sch, b)]
                    for b, _ in group):
                group.append((block, layout))
                break
        else:
            sets.append([(block, layout)])
    return [[b for b, _ in group] for group in sets]


def name(sch, block) -> str:
    return sch.get(block).name_hint


def same_block(sch, a, b) -> bool:
    return sch.get(a).same_as(sch.get(b))


def _same_loops(sch, a, b) -> bool:
    """Equal loop extents and the same number of reduced ones."""
    ea = [sch.get(loop).extent for loop in sch.get_loops(a)]
    eb = [sch.get(loop).extent for loop in sch.get_loops(b)]
    return reduce_count(sch, a) == reduce_count(sch, b) and len(ea) == len(eb) and all(
        tvm_ffi.structural_equal(x, y) for x, y in zip(ea, eb))


def _producers(sch, block) -> set:
    """The names of every block the block reads from, directly or not."""
    seen, todo = set(), [block]
    while todo:
        for p in sch.get_producers(todo.pop()):
            if name(sch, p) not in seen:
                seen.add(name(sch, p))
                todo.append(p)
    return seen


def decompose(sch, block, loop) -> None:
    """The block's init as a loop nest before `loop`, where TVM takes it. Under loops shared with a
    sibling and cut with a predicate (a ragged row, a symbolic count), TVM's first decomposition
    recomputes its blocks' bindings as not affine and refuses the next: that block keeps its init
    inside, which TVM lowers as a test of the reduced indices being all 0."""
    try:
        sch.decompose_reduction(block, loop)
    except s_tir.ScheduleError:
        pass
