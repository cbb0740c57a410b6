"""From a Relax IRModule to a runnable VM executable, one visible sequence of stages:

ConvertToDataflow -> LegalizeOps -> AnnotateTIROpPattern -> FuseOps -> FuseTIR
-> schedule (Dlight, Fallback or MetaSchedule) -> tvm.compile -> Relax VM. Every stage's IR is recorded.
A module with vdevices (`with bt.device(...)` blocks) starts with RealizeVDevice and, after fusion,
gets each kernel's target and inputs on its device (PlaceOnDevices).
"""
from __future__ import annotations

import functools
from typing import Callable

import tvm
import tvm_ffi
from tvm import relax, te, topi
from tvm.s_tir import dlight as dl

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
    if schedules.offloads_matmul(target, schedule):
        sequence.append(("MatmulToCuBLAS", tvm.transform.module_pass(
            lambda mod, _ctx: schedules.offload_matmul(mod), opt_level=0, name="MatmulToCuBLAS")))
    return sequence + [
        ("LegalizeOps", relax.transform.LegalizeOps(half_accumulating_legalizations())),
        ("AnnotateTIROpPattern", relax.transform.AnnotateTIROpPattern()),
        # unused bindings first (e.g. what zeros_like(x) no longer reads once legalized): FuseOps
        # warns about them, and fails on them inside the branches of an If
        ("FuseOps", tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.FuseOps()])),
        ("FuseTIR", relax.transform.FuseTIR()),
    ]


HALF = ("float16", "bfloat16")
# FuseOps's op pattern kinds (tvm/relax/analysis): only their order matters here.
OP_PATTERN = "op_pattern"


def half_accumulating_legalizations() -> dict:
    """LegalizeOps overrides for the ops that add up many elements (library.HALF_ACCUMULATE): on
    float16/bfloat16 operands, TVM's own kernel computed in float32 and rounded once at the end, as
    torch computes them. The casts are stages of that one kernel (no float32 copy in memory), and
    the kernel keeps the fusion pattern of the half one, so fusion makes the same kernels as before."""
    from .codegen import library

    overrides = {}
    for name in library.HALF_ACCUMULATE:
        relax_name = ("relax.nn." if library.lookup(name).fn.__module__.startswith("tvm.relax.op.nn") else "relax.") + name
        default = tvm.ir.Op.get(relax_name).get_attr("FLegalize")
        if default is not None:
            overrides[relax_name] = functools.partial(_legalize_in_float32, default)
    return overrides


# Averages over a static size 0 are NaN, as in torch (TVM's kernel would divide by a constant 0).
NAN_WHEN_EMPTY = {"relax.mean", "relax.variance", "relax.std"}


def _averages_nothing(call: relax.Call) -> bool:
    if call.op.name not in NAN_WHEN_EMPTY or call.args[0].ty.shape is None:
        return False
    shape = call.args[0].ty.shape.values
    axes = range(len(shape)) if call.attrs.axis is None else [int(a) % len(shape) for a in call.attrs.axis]
    return any(isinstance(shape[a], tvm.tirx.IntImm) and int(shape[a]) == 0 for a in axes)


def _legalize_in_float32(default, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    if _averages_nothing(call):
        return bb.call_te(topi.full, call.ty.shape.values, str(call.ty.dtype), float("nan"))
    if not any(_is_half(a) for a in call.args):
        return default(bb, call)
    # the fusion pattern of the op's own kernel, on float32 operands (a half one may not even build)
    scratch = relax.BlockBuilder()
    wide = [relax.Var("x", relax.TensorType(a.ty.shape, "float32")) if _is_half(a) else a for a in call.args]
    pattern = _pattern(scratch, default(scratch, scratch.normalize(relax.Call(call.op, wide, call.attrs))))
    scalar = isinstance(call.ty, relax.TensorType) and call.ty.ndim == 0
    return default(_InFloat32(bb, pattern, scalar), call)


def _is_half(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.dtype in HALF


def _pattern(scratch: relax.BlockBuilder, call) -> int | None:
    if not isinstance(call, relax.Call) or call.op != tvm.ir.Op.get("relax.call_tir"):
        return None
    mod = relax.transform.AnnotateTIROpPattern()(scratch.get())
    attrs = mod[call.args[0]].attrs
    return int(attrs[OP_PATTERN]) if attrs is not None and OP_PATTERN in attrs else None


class _InFloat32:
    """A BlockBuilder whose call_te computes the TE function on float32 copies of its half inputs and
    rounds its float32 results back to that half dtype (other calls go to the real builder)."""

    def __init__(self, bb, pattern, scalar: bool):
        self._bb, self._pattern, self._scalar = bb, pattern, scalar

    def __getattr__(self, name):
        return getattr(self._bb, name)

    def call_te(self, func, *args, **kwargs):
        half = next(a.ty.dtype for a in _relax_args(args) if _is_half(a))

        @functools.wraps(func)
        def in_float32(*te_args, **te_kwargs):
            cast = [topi.cast(a, "float32") if _te_half(a) else a for a in te_args]
            return _round(func(*cast, **te_kwargs), half)

        if self._scalar:
            # a reduction to one number: its cast stays a kernel of its own (one element), since
            # Dlight's GPU reduction rules decline a scalar reduction with an epilogue
            wide = self._bb.emit(self._bb.call_te(functools.wraps(func)(lambda *a, **k: func(*[
                topi.cast(x, "float32") if _te_half(x) else x for x in a], **k)), *args, **kwargs))
            return self._bb.call_te(topi.cast, wide, half)
        if self._pattern is not None:
            kwargs["primfunc_attrs"] = {**kwargs.get("primfunc_attrs", {}), OP_PATTERN: self._pattern}
        return self._bb.call_te(in_float32, *args, **kwargs)


def _relax_args(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _relax_args(a)
        elif isinstance(a, relax.Expr):
            yield a


def _te_half(value) -> bool:
    return isinstance(value, te.Tensor) and value.dtype in HALF


def _round(result, half: str):
    if isinstance(result, (list, tuple)):
        return type(result)(_round(r, half) for r in result)
    return topi.cast(result, half) if isinstance(result, te.Tensor) and result.dtype == "float32" else result


def lower(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, record: Callable[[str, str], None],
          trials: int = 16, modules: dict | None = None) -> tvm.IRModule:
    """Run the Relax passes and the schedule, recording the IR after each (and, into `modules`,
    the module itself: the fusion map reads them)."""
    heterogeneous = "vdevice" in mod.global_infos
    if heterogeneous:
        mod = relax.transform.RealizeVDevice()(mod)
        record("RealizeVDevice", mod.script())
    for name, pass_ in passes(None if heterogeneous else target, schedule):
        mod = pass_(mod)
        record(name, mod.script())
        if modules is not None:
            modules[name] = mod
    if heterogeneous:
        mod = place_on_devices(mod)
        record("PlaceOnDevices", mod.script())
        cuda = [v.target for v in mod.global_infos["vdevice"] if v.target.kind.name == "cuda"]
        if cuda:  # each kernel carries its target: the rules schedule the CUDA ones only
            with cuda[0]:
                mod = dl.ApplyDefaultSchedule(*schedules.gpu_rules(schedule))(mod)
    else:
        mod = schedules.apply(mod, target, schedule, trials)
    mod = schedules.skip_empty_outputs(schedules.init_outside_reductions(mod), None if heterogeneous else target)
    record("schedule", mod.script())
    return mod


def place_on_devices(mod: tvm.IRModule) -> tvm.IRModule:
    """After fusion, for a module with vdevices: give every kernel the target of the device its
    call's result lives on (FuseTIR drops it), and copy onto that device the inputs that have no
    device (constants, which the VM keeps on the first device, the CPU)."""
    vdevices = list(mod.global_infos["vdevice"])
    targets = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mod[gvar] = _DevicePlacer(mod, vdevices[0], targets).visit_expr(func)
    for gvar, target in targets.items():
        func = mod[gvar]
        if func.attrs is None or "target" not in func.attrs:
            mod[gvar] = func.with_attr("target", target)
    return mod


@relax.expr_functor.mutator
class _DevicePlacer(relax.PyExprMutator):
    """Records each called kernel's target and moves its device-less operands to its device."""

    def __init__(self, mod, host_vdevice, targets):
        super().__init__(mod)
        self.host = host_vdevice
        self.targets = targets

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op != tvm.ir.Op.get("relax.call_tir"):
            return call
        out = call.ty_args[0]
        vdevice = out.vdevice if isinstance(out, relax.TensorType) else out.fields[0].vdevice
        vdevice = vdevice or self.host
        self.targets[call.args[0]] = vdevice.target
        if vdevice.target.kind.name == self.host.target.kind.name:
            return call
        operands = [self.builder_.emit(relax.op.to_vdevice(a, vdevice))
                    if isinstance(a.ty, relax.TensorType) and a.ty.vdevice is None else a
                    for a in call.args[1].fields]
        return relax.Call(call.op, [call.args[0], relax.Tuple(operands)] + list(call.args[2:]),
                          call.attrs, call.ty_args, call.span)


def build(mod: tvm.IRModule, target: tvm.target.Target):
    if "vdevice" in mod.global_infos:  # every kernel carries its own target
        target = None
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


def generated_source(executable, target: tvm.target.Target, both: bool = False) -> str:
    """The CUDA kernels for a GPU target, the LLVM IR for a CPU one; `both`: the LLVM IR then the CUDA
    kernels (a function with device blocks has both)."""
    sources = {}
    stack = [executable.mod]
    while stack:
        module = stack.pop(0)
        if module.kind in ("cuda", "llvm") and module.kind not in sources:
            sources[module.kind] = module.inspect_source() if module.kind == "cuda" else module.inspect_source("ll")
        stack.extend(module.imports)
    if both:
        return "\n".join(f"// ===== {kind} =====\n{sources[kind]}" for kind in ("llvm", "cuda") if kind in sources)
    return sources.get("cuda" if target.kind.name == "cuda" else "llvm", "")
