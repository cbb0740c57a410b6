"""What wraps a rule: Guarded (a rule that fails declines the kernel; the kernel it schedules is
tagged with its name, RULE_ATTR, which `k.fusion` shows), LongRows (Dlight's GeneralReduction with
long row loops left as loops), `rule_name`, and Declines (what the rules said of the kernels they
declined, written on those that ended on Fallback: DECLINED_ATTR)."""
from __future__ import annotations

import threading

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl

from ..core import config
from .analysis import find_all
from .reasons import hearing
from .registers import TooManyRegisters, small_registers
from .unchecked import Schedule


# what a rule's own code raises when it is wrong, not when TVM refuses a schedule (config.strict_rules)
_PROGRAMMING_ERRORS = (AttributeError, NameError, TypeError)
RULE_ATTR = "babytriton.rule"  # the PrimFunc attribute naming the rule that scheduled it (k.fusion)


class Guarded(dl.ScheduleRule):
    """A Dlight rule that declines a kernel it fails on, so the next rule (or none) takes it: e.g.
    the CPU GEMV rule asserts on a reduction fused after a broadcast (found by the fuzzer). The
    kernel it schedules is tagged with the rule's name (RULE_ATTR), which `k.fusion` shows; what a
    rule says as it declines a kernel (`reasons.decline`, or its failure) is noted for it (Declines).
    A CUDA kernel whose threads would keep too large a register array is declined too (registers.py)."""

    def __init__(self, rule, guard: bool = True):
        self.rule, self.guard = rule, guard

    def apply(self, func, target, tunable):
        with hearing() as heard:
            try:
                space = self.rule.apply(func, target, tunable)
                if isinstance(space, s_tir.Schedule) and target is not None and target.kind.name == "cuda":
                    space = small_registers(space)  # a kernel no launch could run declined
            except TooManyRegisters as error:
                if not self.guard:
                    raise
                heard[:] = [str(error)]
                space = None
            except Exception as error:  # noqa: BLE001 - a rule's own bug must not fail the compile
                if not self.guard or isinstance(error, _PROGRAMMING_ERRORS) and config.strict_rules() and \
                        type(self.rule).__module__.startswith("babytriton."):
                    raise
                heard[:] = [f"failed ({type(error).__name__})"]
                space = None
        if space is None and heard:
            Declines.note(func, rule_name(self.rule), heard[0])
        if isinstance(space, s_tir.Schedule):
            return Schedule(space.mod["main"].with_attr(RULE_ATTR, rule_name(self.rule)))
        return space

    def __repr__(self):
        return f"Guarded({rule_name(self.rule)})"


DECLINED_ATTR = "babytriton.declined"  # what the rules said of a kernel that ended on Fallback or on none
PASSED_ON = ("dlight.gpu.Fallback", None)  # the RULE_ATTR of a kernel that no faster rule took
_book = threading.local()


class Declines:
    """What babytriton's rules said (`reasons.decline`) of the kernels of `mod` they declined while
    Dlight applied them; `onto` writes it on each kernel that then ended on Fallback or on no rule."""

    def __init__(self, mod: tvm.IRModule):
        self.kernels = {gvar.name_hint: func for gvar, func in mod.functions_items()}  # as the rules see them
        self.said = []  # (kernel, rule name, reason), in the order the rules ran

    def __enter__(self):
        self.outer, _book.open = getattr(_book, "open", None), self
        return self

    def __exit__(self, *exc):
        _book.open = self.outer

    @staticmethod
    def note(func, rule: str, reason: str) -> None:
        """Keep a rule's reason for declining `func`, while a Declines is open on this thread."""
        book = getattr(_book, "open", None)
        if book is not None:
            book.said.append((func, rule, reason))

    def onto(self, mod: tvm.IRModule) -> tvm.IRModule:
        """The scheduled `mod` with "Rule: reason; ..." (DECLINED_ATTR; rules that gave the same reason
        together) on each kernel that ended on Fallback or on no rule and that a rule declined with a reason."""
        out = mod
        for gvar, func in mod.functions_items():
            seen = self.kernels.get(gvar.name_hint)
            if not isinstance(func, tirx.PrimFunc) or seen is None:
                continue
            rule = str(func.attrs[RULE_ATTR]) if func.attrs is not None and RULE_ATTR in func.attrs else None
            said: dict[str, list[str]] = {}  # reason -> the rules that gave it
            for kernel, name, reason in self.said:
                if kernel.same_as(seen):
                    said.setdefault(reason, []).append(name)
            if said and rule in PASSED_ON:
                text = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in said.items())
                out = out if out is not mod else mod.clone()
                out[gvar] = func.with_attr(DECLINED_ATTR, text)
        return out


class LongRows(dl.ScheduleRule):
    """Dlight's GeneralReduction (one block per row) with its row loops unrolled only when they are
    short. GeneralReduction unrolls every loop of up to 256 steps into straight code: a 32,000-wide
    row (125 steps of 256 threads) became thousands of lines per pass, and a backward with two such
    passes ran 8x slower than one pass took. A longer loop stays a loop, which nvcc unrolls a few
    steps at a time."""

    def __init__(self, rule, max_unrolled: int = 32):
        self.rule, self.max_unrolled = rule, max_unrolled

    def apply(self, func, target, tunable):
        sch = self.rule.apply(func, target, tunable)
        if not isinstance(sch, s_tir.Schedule):
            return sch
        done = set()
        for realize in find_all(sch.mod["main"].body, s_tir.SBlockRealize):
            for loop in sch.get_loops(sch.get_sblock(realize.block.name_hint)):
                node = sch.get(loop)
                if node.loop_var in done or "pragma_auto_unroll_max_step" not in node.annotations:
                    continue
                done.add(node.loop_var)
                if not isinstance(node.extent, tirx.IntImm) or int(node.extent) > self.max_unrolled:
                    sch.unannotate(loop, "pragma_auto_unroll_max_step")
                    sch.unannotate(loop, "pragma_unroll_explicit")
        return sch


def rule_name(rule) -> str:
    """babytriton's rules by class name, Dlight's as dlight.gpu.Matmul, through wrappers."""
    while hasattr(rule, "rule"):
        rule = rule.rule
    module = type(rule).__module__
    if ".dlight." in module:
        return "dlight." + module.split(".dlight.")[1].split(".")[0] + "." + type(rule).__name__
    return type(rule).__name__
