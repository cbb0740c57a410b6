"""Dlight's GPU rules without their unbounded inlining: each inlines every producer of a kernel first,
whatever the expression grows to (NaN-aware max/min name each operand three times, so a chain of them
grows exponentially, and TVM's simplifier never finishes). `Bounded` declines a kernel that would grow
so for the rule it wraps; BoundedFallback, the last rule, inlines within babytriton's bound instead."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import max_threads_per_block
from tvm.s_tir.dlight.gpu.fallback import _has_internal_thread_env

from .inlining import GPU_CALL_DEPTH, MAX_TREE_SIZE, _children, inline, visit_weights
from .reasons import decline
from .unchecked import Schedule

INLINED_LIMIT = 4 * MAX_TREE_SIZE  # the simplifier's cost of a kernel's largest expression, all of it inlined


def inlined_size(func: tirx.PrimFunc) -> int:
    """The simplifier's cost (inlining.py's `Costs`) of the largest expression a kernel's stores
    make with every producer inlined, in time linear in the kernel's expressions as DAGs."""
    produced, memo = {}, {}  # buffer -> its stored expression's inlined cost; node -> its cost

    def size(expr) -> int:
        if expr.__hash__() in memo:
            return memo[expr.__hash__()][1]
        children = _children(expr)
        own = produced.get(expr.source, 1) if isinstance(expr, tvm.ir.expr.TensorLoad) else 1  # a producer inlined
        total = own + sum(w * size(c) for w, c in zip(visit_weights(expr, len(children)), children))
        memo[expr.__hash__()] = (expr, total)  # kept alive: its hash stays its own
        return total

    def store(node):
        produced[node.buffer] = size(node.value)

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, store)], order="pre")
    return max(produced.values(), default=0)


class Bounded(dl.ScheduleRule):
    """A Dlight rule that inlines all of a kernel (Matmul, GEMV, Reduction, GeneralReduction), declining
    the kernels whose expressions would then cost the simplifier more than INLINED_LIMIT."""

    def __init__(self, rule):
        self.rule = rule

    def apply(self, func, target, tunable):
        if isinstance(func, tirx.PrimFunc) and (size := inlined_size(func)) > INLINED_LIMIT:
            return decline(f"an inlined expression of cost {size}, over {INLINED_LIMIT}")
        return self.rule.apply(func, target, tunable)


class BoundedFallback(dl.ScheduleRule):
    """dlight.gpu.Fallback (its name in `k.fusion`) with inlining bounded by the tree size: NaN-aware
    max/min name each operand three times, so Dlight's unbounded inlining of a relu6 / logaddexp /
    hypot chain made a 650,000-character kernel that TVM's simplifier never finished (fuzz 40000891).
    Producers read more than once stay blocks unless cheap (`shared=False`): within the tree bound
    alone, TVM's StmtSimplify still never finished on the nested selects of a relu6 chain."""

    def __init__(self):
        self.rule = dl.gpu.Fallback()  # what `rule_name` reports, and the target check

    def apply(self, func, target, _tunable):
        if not isinstance(func, tirx.PrimFunc) or not self.rule.is_target_available(target):
            return None
        sch = Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        threads = max_threads_per_block(target)
        reductions = [_bind(sch, info, threads) for info in inline(sch, infos, GPU_CALL_DEPTH, shared=False)]
        for block, loop in filter(None, reductions):
            sch.decompose_reduction(block, loop)
        return sch


def _bind(sch, info, threads: int):
    """One thread per element of the block's spatial loops (fused, then split into blocks of
    `threads`); its reduction loops stay serial inside. The (block, first reduction loop), if any."""
    block = info.block_rv
    loops = sch.get_loops(block)
    if any(sch.get(loop).thread_binding is not None for loop in loops) or (
            not loops and _has_internal_thread_env(sch.get(block).body)):  # it launches its own threads
        return None
    kinds = {"S": [], "R": [], "O": []}
    for loop, kind in zip(loops, info.dom_kind()):
        kinds[kind].append(loop)
    spatial = kinds["S"] or [sch.add_unit_loop(block)]
    sch.reorder(*spatial, *kinds["R"], *kinds["O"])
    bx, tx = sch.split(sch.fuse(*spatial), factors=[None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return (block, kinds["R"][0]) if kinds["R"] else None
