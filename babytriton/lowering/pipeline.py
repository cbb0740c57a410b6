"""From a Relax IRModule to a runnable VM executable, one visible sequence of stages:

ConvertToDataflow -> AttentionToSDPA -> [GPU: MatmulToCuBLAS] -> DecomposeSoftmax -> [GPU: OnlineSoftmax] ->
LegalizeOps ->
AnnotateTIROpPattern -> FuseRowwise -> FuseOps -> FuseMultiOutput -> FuseTIR -> schedule (Dlight, Fallback
or MetaSchedule) -> tvm.compile -> Relax VM. Every stage's IR is recorded.
A module with vdevices (`with bt.device(...)` blocks) starts with RealizeVDevice and, after fusion,
gets each kernel's target and inputs on its device (PlaceOnDevices).
"""
from __future__ import annotations

import functools

from typing import Callable

import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import dlight as dl

from ..passes import (argmax_as_max, decompose, inplace, max_argmax, multi_output, offload, online, operands,
                      row_partials, rowwise, shifts, views)
from ..operators import legalize
from . import cuda_spelling, nvrtc
from .divisors import nonzero_divisors
from .reduced_values import reduced_values_in_registers
from .register_selects import selects_on_registers
from .. import schedules
from ..core import targets

SCHEDULES = schedules.SCHEDULES


def passes(target: tvm.target.Target | None = None, schedule: str = "dlight",
           side_outputs: bool = False) -> list[tuple[str, tvm.transform.Pass]]:
    """The Relax passes, in order, each named as its stage."""
    return _before_legalizing(target, schedule) + [
        # babytriton's rules first where TVM's lowering loses NaN or infinities, or sums halves in
        # half precision (see legalize.py)
        # a view read by several kernels is repeated in each (views.py), then the ops become TIR
        # (on a GPU, torch's max.dim first: its values and indices from one reduction, max_argmax.py)
        # (on a CPU, an argmax along rows as the row's max and the first index holding it: argmax_as_max.py)
        ("LegalizeOps", tvm.transform.Sequential(
            ([max_argmax.MaxWithArgmax] if max_argmax.applies(target) else [])
            + ([argmax_as_max.ArgmaxAsMax] if argmax_as_max.applies(target) else []) + [
            tvm.transform.module_pass(lambda mod, _ctx: views.repeat_views(views.casts_past_views(mod)), opt_level=0,
                                      name="RepeatViews"),
            relax.transform.LegalizeOps(legalize.legalize_map())])),
        # a gather (`take`, `x[idx]`) is injective, not opaque: its consumers index through it (views.py);
        # a reduction repeated on equal values is computed once, and one over a whole tensor takes no
        # consumer over the tile (rowwise.py); one over a row group's rows and more is split into the
        # group's per-row partials and their reduction (row_partials.py)
        ("AnnotateTIROpPattern", tvm.transform.Sequential([views.AnnotatePatterns, rowwise.ReductionsOnce,
                                                           rowwise.WholeReductionsApart, row_partials.RowPartials])),
        # one kernel per row-wise computation: FuseOps never puts two reductions in one kernel
        # (a row kernel also writes what it computes that is read outside it, a scale or a residual sum;
        # in a training forward, over any rows, the per-row values it saves for the backward)
        ("FuseRowwise", rowwise.FuseRowwiseSideOutputs if side_outputs else rowwise.FuseRowwise),
        # unused bindings first (e.g. what zeros_like(x) no longer reads once legalized): FuseOps
        # warns about them, and fails on them inside the branches of an If
        ("FuseOps", tvm.transform.Sequential([relax.transform.DeadCodeElimination(), _own_items_for_match_casts(),
                                              relax.transform.FuseOps()])),
        # one kernel for element-wise kernels over one shape that read each other's results (an
        # optimizer's p, m and v): FuseOps keeps a value that is also a result out of its consumer
        ("FuseMultiOutput", multi_output.FuseMultiOutput),
        # a reshape left as a kernel of its own is a view of its input's memory; in a kernel, what
        # reads a view reads through its index (views.py); a kernel takes each tensor once, the
        # repeated views of one tensor too (operands.py)
        ("FuseTIR", tvm.transform.Sequential([relax.transform.FuseTIR(), views.FreeReshapes,
                                              operands.DeduplicateOperands, views.InlineViews])),
    ]


def _before_legalizing(target: tvm.target.Target | None, schedule: str) -> list[tuple[str, tvm.transform.Pass]]:
    """The passes on Relax's own operators: dataflow blocks, the rewrites that hand work to torch,
    softmax's decomposition and the online softmax."""
    # `x.detach()` is `no_grad(x)` for the backward's Gradient pass; the forward computes x itself
    attached = tvm.transform.module_pass(lambda mod, _ctx: _attached(mod), opt_level=0, name="Attach")
    sequence = [("ConvertToDataflow", tvm.transform.Sequential([attached,
                                                                relax.transform.ConvertToDataflow(min_size=1)]))]
    attention = targets.offloads_attention(target, schedule)
    rewrites = [("AttentionToSDPA", offload.offload_attention)] if attention else []
    matmuls = targets.offloaded_matmuls(target, schedule)
    if matmuls.dtypes or matmuls.small:
        # after attention: a block's matrix products go to torch with it, whole
        rewrites.append(("MatmulToTorch", functools.partial(offload.offload_matmul, offload=matmuls)))
    if target is not None and target.kind.name == "cuda":
        rewrites.append(("SortsToTorch", offload.offload_sorts))  # see offload._SortsToTorch
    sequence += [(name, tvm.transform.module_pass(lambda mod, _ctx, rewrite=rewrite: rewrite(mod), opt_level=0,
                                                  name=name)) for name, rewrite in rewrites]
    if decompose.DECOMPOSE:
        # a library softmax as its primitives: its producers and consumers join its row kernel
        sequence.append(("DecomposeSoftmax", decompose.DecomposeSoftmax))
    if online.applies(target):
        # one reduction for a row's max and exp-sum: the GPU kernel reads each row once for both
        sequence.append(("OnlineSoftmax", online.OnlineSoftmax))
    return sequence


def _attached(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every `no_grad(x)` of its Relax functions read as x (shifts.attach)."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, fn in mod.functions.items():
        if isinstance(fn, relax.Function):
            out[gv] = shifts.attach(fn)
    return out


def lower(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, record: Callable[[str, str], None],
          trials: int = 16, modules: dict | None = None, side_outputs: bool = False) -> tvm.IRModule:
    """Run the Relax passes and the schedule, recording the IR after each (and, into `modules`,
    the module itself: the fusion map reads them)."""
    heterogeneous = "vdevice" in mod.global_infos
    if heterogeneous:
        mod = relax.transform.RealizeVDevice()(mod)
        record("RealizeVDevice", mod.script())
    with legalize.nan_test(None if heterogeneous else target):  # every legalization, row_partials' too
        for name, pass_ in passes(None if heterogeneous else target, schedule, side_outputs):
            mod = pass_(mod)
            record(name, mod.script())
            if modules is not None:
                modules[name] = mod
    if heterogeneous:
        mod = place_on_devices(mod)
        record("PlaceOnDevices", mod.script())
    mod = schedule_kernels(mod, target, schedule, trials)
    if not heterogeneous:
        # after scheduling: TVM's vectorize, parallel, bind and compute_at refuse a block that reads
        # and writes one buffer, so the kernel is scheduled as computing a new value and then writes
        # it in place (before scheduling, `y.add_(x)` on a CPU was a serial loop: 0.17x torch.compile)
        mod = inplace.write_in_place(mod)
    record("schedule", mod.script())
    return mod


def schedule_kernels(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int = 16) -> tvm.IRModule:
    """Every kernel of a fused module scheduled (each on its own device's target, where the module
    has device blocks), then the TIR passes after scheduling."""
    heterogeneous = "vdevice" in mod.global_infos
    if heterogeneous:
        cuda = [v.target for v in mod.global_infos["vdevice"] if v.target.kind.name == "cuda"]
        cpu = [v.target for v in mod.global_infos["vdevice"] if v.target.kind.name == "llvm"]
        with schedules.Declines(mod) as declined:  # why a kernel ended on Fallback, for k.fusion
            if cuda:  # each kernel carries its target: each rule set schedules its own target's kernels
                with cuda[0]:
                    mod = dl.ApplyDefaultSchedule(*schedules.gpu_rules(schedule))(mod)
            if cpu:
                with cpu[0]:
                    mod = dl.ApplyDefaultSchedule(*schedules.cpu_rules(schedule))(mod)
        mod = declined.onto(mod)
    else:
        mod = schedules.apply(mod, target, schedule, trials)
    mod = schedules.skip_empty_outputs(schedules.init_outside_reductions(mod), None if heterogeneous else target)
    mod = schedules.bool_buffers_as_bytes(mod, None if heterogeneous else target)
    mod = schedules.own_thread_slices(mod)
    # a guard that inlining gave a constant (CUDA can't print it), before half division becomes float32's
    mod = legalize.settle_kept_constants(mod)
    mod = schedules.half_math_in_float32(mod, None if heterogeneous else target)
    mod = schedules.bfloat16_broadcasts_serial(mod, None if heterogeneous else target)
    mod = schedules.bfloat16_reads_in_binds(mod, None if heterogeneous else target)
    if not heterogeneous:
        mod = allocate_empty_results(mod)
    return schedules.kernels_as_built(mod)


def failing_kernel(fused: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int = 16) -> str | None:
    """After the schedule or the build failed: the name of the first kernel of `fused` (FuseTIR's
    module) that fails to schedule or build as a module of its own, built as every build is (the
    TIR_PIPELINE, NVRTC, fast exp); None if none does (costly, so only run after a failure). It
    locates the failure at the user's lines the kernel computes."""
    if "vdevice" in fused.global_infos:  # kernels get their devices' targets later (place_on_devices)
        return None
    nvrtc.install()
    for gvar, func in fused.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        alone = tvm.IRModule({gvar: func}, attrs=fused.attrs, global_infos=fused.global_infos)
        try:
            scheduled = schedule_kernels(alone, target, schedule, trials)
            kernels = {gv: f.with_attr("global_symbol", gv.name_hint) for gv, f in scheduled.functions_items()
                       if isinstance(f, tvm.tirx.PrimFunc)}
            with schedules.fast_exp():
                compile_module(tvm.IRModule(kernels), target)
        except Exception:  # noqa: BLE001 - the failure being located
            return gvar.name_hint
    return None


def failing_binding(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int = 16,
                    budget: int = 200):
    """After the pipeline failed on `mod`: the first binding (a call of one Relax op) that fails
    alone, lowered and built as a module of its own; None if none does. It locates TVM's failure
    at the user's expression that produced the op (costly, so only run after a failure)."""
    try:
        return _failing_binding(mod, target, schedule, trials, budget)
    except Exception:  # noqa: BLE001 - locating is a courtesy: the error then points at the `def`
        return None


def _failing_binding(mod, target, schedule, trials, budget):
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                call = binding.value
                if not isinstance(binding, relax.VarBinding) or not isinstance(call, relax.Call) \
                        or not isinstance(call.op, tvm.ir.Op):
                    continue
                budget -= 1
                if budget < 0:
                    return None
                params = list(relax.analysis.free_vars(call))
                body = relax.SeqExpr([relax.BindingBlock([binding])], binding.var)
                alone = tvm.IRModule({"main": relax.Function(params, body, binding.var.ty)},
                                     global_infos=mod.global_infos)
                try:
                    build(lower(alone, target, schedule, lambda *_: None, trials), target)
                except Exception:  # noqa: BLE001 - the failure being located
                    return binding.var
    return None


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


@relax.expr_functor.mutator
class _EmptyResults(relax.PyExprMutator):
    """A kernel call whose one result has a static size 0 becomes an allocation of it."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        ty = call.ty
        if call.op.same_as(tvm.ir.Op.get("relax.call_tir")) and isinstance(ty, relax.TensorType) \
                and ty.shape is not None and any(isinstance(d, tvm.tirx.IntImm) and int(d) == 0
                                                 for d in ty.shape.values):
            return relax.op.builtin.alloc_tensor(relax.ShapeExpr(ty.shape.values), str(ty.dtype), 0)
        return call


def allocate_empty_results(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every statically empty kernel result as a bare allocation (there is nothing to write):
    otherwise TVM folds the call of its bodiless kernel into an empty constant, which its executable
    format writes but cannot read back ("Invalid DLTensor file format" when a GPU VM loads it)."""
    return schedules.updated(mod, relax.Function, _EmptyResults().visit_expr)


# A function of every executable that returns nothing: the VM keeps the value its last call returned
# until its next call, so a runner calls this after each large call and the result's memory goes back
# to the VM's pool when the caller drops it. Otherwise each call's output is a second buffer, and a
# 16 MB element-wise call ran at 0.66 of a copy instead of 0.92 (its data fell out of the last-level cache).
RELEASE = "babytriton_release"


def build(mod: tvm.IRModule, target: tvm.target.Target):
    nvrtc.install()
    release = relax.Function([], relax.Tuple([]), relax.TupleType([])).with_attr("global_symbol", RELEASE)
    mod = tvm.IRModule({**dict(mod.functions_items()), tvm.ir.GlobalVar(RELEASE): release},
                       attrs=mod.attrs, global_infos=mod.global_infos)
    with schedules.fast_exp():
        return _build(mod, target)


def branch_on_uniform_selects(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """A CUDA kernel's vector select whose condition is one bool for every lane (a `Broadcast`:
    `where` on a row mask, a scalar, the index test of a slice written in place) as an
    `if_then_else` on that bool. TVM's CUDA code generator declares such a condition with the select's
    own vector type (`float4 c = make_ushort4(...)`), which NVRTC and nvcc reject; the branch moves
    whole vectors (and loads only the side taken)."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "cuda":
        return func  # LLVM selects on a splat condition as it is

    def branch(select):
        cond = select.condition
        if not isinstance(cond, tvm.tirx.Broadcast):
            return select
        return tvm.tirx.if_then_else(cond.value, select.true_value, select.false_value)
    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.tirx.Select, branch)]))


def unrestricted_if_read_back(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """A CUDA kernel that reads memory it writes (a multi-output kernel whose later results read its
    earlier ones) without `__restrict__` on its pointers. With it, nvcc 13 merged such a read and a
    read of a read-only input (`where(m, 5.0, y)`: `m ? c2[0] : y[i]`) into one load through the
    read-only cache (`ld.global.nc`), which misses this kernel's own store to y[i]: stale values on
    the GPU (issue 27: topk and sort of computed values). SplitHostDevice marks every kernel noalias."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "cuda":
        return func
    # registers and shared memory are no pointer's: a copy staged through them (`x_local`) reads back
    # only itself, and counted, it took `__restrict__` (so `ld.global.nc`) from every staged kernel
    stored = {store.buffer for store in schedules.find_all(func.body, tvm.tirx.BufferStore)
              if store.buffer.scope() in ("global", "")}
    if not any(any(load.source.same_as(s) for s in stored) for load in schedules.find_all(func.body, tvm.ir.TensorLoad)):
        return func
    return func.with_attr("tirx.noalias", False)


def half_specials_from_float32(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """A CUDA kernel's constants of a dtype narrower than float32 written as float32's converted: TVM's
    CUDA code generator prints a bfloat16 ±inf or NaN as `__float2bfloat16_rn(inff)` (a hexfloat of
    inf: no such identifier, nvcc refuses it), whereas float32's are CUDART_INF_F and CUDART_NAN_F;
    and a half literal includes no cuda_fp16.h, which only a half type does (`(half)`): a kernel whose
    only half value was a constant, `exp` of one, met "identifier hexp is undefined". Run after the
    device module's last simplification, which would fold the cast back."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "cuda":
        return func

    def spelled(const):
        dtype = const.ty.dtype
        if dtype.bits >= 32:
            return const
        return tvm.tirx.Cast(str(dtype), tvm.tirx.const(const.value, "float32"))
    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.tirx.FloatImm, spelled)]))


# The TIR pipeline babytriton builds with (every tvm.compile of its kernels): TVM's own, and before
# each device module's code generation the fixes above (the constants last: nothing simplifies after).
TIR_PIPELINE = "babytriton"


def _tir_pipeline():
    lower, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("s_tir")
    uniform = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: branch_on_uniform_selects(func),
                                                opt_level=0, name="BranchOnUniformSelects")
    constants = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: half_specials_from_float32(
        cuda_spelling.nvcc_spellings(func)),
                                                  opt_level=0, name="HalfSpecialsFromFloat32")
    unrestricted = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: unrestricted_if_read_back(func),
                                                     opt_level=0, name="UnrestrictedIfReadBack")
    # before TVM's vectoriser: CPU kernels' math calls it has no vector form of (fast_math.vector_math)
    vector_math = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: schedules.vector_math(func),
                                                    opt_level=0, name="VectorMath")
    reduced = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: reduced_values_in_registers(func),
                                                opt_level=0, name="ReducedValuesInRegisters")
    selects = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: selects_on_registers(func),
                                                opt_level=0, name="SelectsOnRegisters")
    # (first: what TVM's lowering then hoists divides by at least 1, divisors.py)
    divisors = tvm.tirx.transform.prim_func_pass(lambda func, _mod, _ctx: nonzero_divisors(func),
                                                 opt_level=0, name="NonzeroDivisors")
    return tvm.transform.Sequential([divisors, vector_math, lower]), finalize_host, lambda: tvm.transform.Sequential(
        [reduced, selects, uniform, unrestricted, finalize_device(), constants])


tvm.tirx.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)


def compile_module(mod: tvm.IRModule, target: tvm.target.Target | None):
    """tvm.compile with babytriton's TIR pipeline and its vectorisable float32 math (`fast_exp`), for
    whole-tensor functions and backend="tir" loops alike."""
    with schedules.fast_exp():
        return tvm.compile(mod, target=target, tir_pipeline=TIR_PIPELINE)


def _build(mod: tvm.IRModule, target: tvm.target.Target):
    if "vdevice" in mod.global_infos:  # every kernel carries its own target
        target = None
    if not has_branches(mod):
        return compile_module(mod, target)
    # TVM's StaticPlanBlockMemory lets code after one branch of an `If` reuse storage first allocated
    # inside that branch, which is unallocated when the other branch ran: a segfault (apache/tvm#17348).
    # Modules with branches build without it; the VM's pooled allocator still recycles freed memory.
    ctx = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                   disabled_pass=[*ctx.disabled_pass, "StaticPlanBlockMemory"],
                                   instruments=list(ctx.instruments), config=dict(ctx.config)):
        return compile_module(mod, target)


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


def _own_items_for_match_casts() -> tvm.transform.Pass:
    """A match_cast of a tuple's item (a loop's result) reads its own copy of the item: FuseOps put the
    item in the kernel of another reader and made that kernel return its own input (so FuseTIR
    failed: fuzz seed 7010021221)."""
    return relax.transform.dataflowblock_pass(
        lambda block, _mod, _ctx: _OwnItems().visit_binding_block(block), opt_level=0, name="OwnItemsForMatchCasts")


@relax.expr_functor.mutator
class _OwnItems(relax.PyExprMutator):
    def __init__(self):
        super().__init__()
        self.items = {}

    def visit_var_binding_(self, binding):
        if isinstance(binding.value, relax.TupleGetItem):
            self.items[binding.var] = binding.value
        super().visit_var_binding_(binding)

    def visit_match_cast_(self, binding):
        item = self.items.get(binding.value)
        if item is None:
            return super().visit_match_cast_(binding)
        own = self.builder_.emit(relax.TupleGetItem(self.visit_expr(item.tuple_value), item.index))
        self.builder_.emit_normalized(relax.MatchCast(binding.var, own, binding.ty))
