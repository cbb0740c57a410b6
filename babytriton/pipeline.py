"""From a Relax IRModule to a runnable VM executable, one visible sequence of stages:

ConvertToDataflow -> LegalizeOps -> AnnotateTIROpPattern -> FuseOps -> FuseTIR
-> schedule (Dlight, Fallback or MetaSchedule) -> tvm.compile -> Relax VM. Every stage's IR is recorded.
"""
from __future__ import annotations

from typing import Callable

import tvm
import tvm_ffi
from tvm import relax

from . import schedules

TARGET_ALIASES = {"cpu": "llvm", "llvm": "llvm", "gpu": "cuda", "cuda": "cuda"}
SCHEDULES = schedules.SCHEDULES
# Off a GPU, "gpu" still needs an architecture to generate CUDA for; Hopper is what we run on.
DEFAULT_CUDA_ARCH = "sm_90"


def check_target(target) -> None:
    """Validate a target option at decoration time, without touching any device."""
    if isinstance(target, tvm.target.Target):
        if target.kind.name not in ("llvm", "cuda"):
            raise ValueError(f"unsupported target kind {target.kind.name!r}; babytriton builds for llvm and cuda")
        return
    if isinstance(target, dict):
        check_target(tvm.target.Target(target))
        return
    if target not in TARGET_ALIASES:
        raise ValueError(f"unknown target {target!r}; use 'cpu' (or 'llvm'), 'gpu' (or 'cuda'), "
                         "or a tvm.target.Target")


def resolve_target(target) -> tvm.target.Target:
    """The concrete TVM target: the host CPU, or the local GPU's architecture (sm_90 without one)."""
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, dict):
        return tvm.target.Target(target)
    if TARGET_ALIASES[target] == "llvm":
        return tvm.target.Target.from_device(tvm.cpu())
    if tvm.cuda().exist:
        return tvm.target.Target.from_device(tvm.cuda())
    return tvm.target.Target({"kind": "cuda", "arch": DEFAULT_CUDA_ARCH})


def device_kind(target: tvm.target.Target) -> str:
    return "cuda" if target.kind.name == "cuda" else "cpu"


def passes(target: tvm.target.Target | None = None, schedule: str = "dlight") -> list[tuple[str, tvm.transform.Pass]]:
    """The Relax passes, in order, each named as its stage."""
    sequence = [("ConvertToDataflow", relax.transform.ConvertToDataflow(min_size=1))]
    if target is not None and target.kind.name == "cuda" and schedule == "dlight":
        sequence.append(("MatmulToCuBLAS", tvm.transform.module_pass(
            lambda mod, _ctx: schedules.offload_matmul(mod), opt_level=0, name="MatmulToCuBLAS")))
    return sequence + [
        ("LegalizeOps", relax.transform.LegalizeOps()),
        ("AnnotateTIROpPattern", relax.transform.AnnotateTIROpPattern()),
        ("FuseOps", relax.transform.FuseOps()),
        ("FuseTIR", relax.transform.FuseTIR()),
    ]


def lower(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, record: Callable[[str, str], None],
          trials: int = 16) -> tvm.IRModule:
    """Run the Relax passes and the schedule, recording the IR after each."""
    for name, pass_ in passes(target, schedule):
        mod = pass_(mod)
        record(name, mod.script())
    mod = schedules.apply(mod, target, schedule, trials)
    record("schedule", mod.script())
    return mod


def build(mod: tvm.IRModule, target: tvm.target.Target):
    if not has_branches(mod):
        return tvm.compile(mod, target=target)
    # TVM's StaticPlanBlockMemory lets code after one branch of an `If` reuse storage first allocated
    # inside that branch, which is unallocated when the other branch ran: a segfault (apache/tvm#17348).
    # Modules with branches build without it; the VM's pooled allocator still recycles freed memory.
    ctx = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                   disabled_pass=[*ctx.disabled_pass, "StaticPlanBlockMemory"],
                                   instruments=list(ctx.instruments), config=dict(ctx.config)):
        return tvm.compile(mod, target=target)


def has_branches(mod: tvm.IRModule) -> bool:
    found = []
    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func, (relax.If, found.append))
    return bool(found)


def generated_source(executable, target: tvm.target.Target) -> str:
    """The CUDA kernels for a GPU target, the LLVM IR for a CPU one."""
    want = "cuda" if target.kind.name == "cuda" else "llvm"
    stack = list(executable.mod.imports)
    while stack:
        module = stack.pop(0)
        if module.kind == want:
            return module.inspect_source() if want == "cuda" else module.inspect_source("ll")
        stack.extend(module.imports)
    return ""
