"""How fused TIR kernels get a schedule: Dlight's rules plus babytriton's own, the tutorial's
Fallback-only mode, or MetaSchedule tuning with an on-disk database that later runs reuse.

On a GPU, "dlight" also hands matrix products to cuBLAS through torch (see `offload_matmul`):
TVM's PyPI build has no cuBLAS, while torch ships it and a Relax packed call reaches it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

import torch
import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import try_inline
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.sym.pattern import detect_linear_equation

from .errors import debug_enabled
from .types import vm_to_torch

SCHEDULES = ("dlight", "fallback", "meta_schedule")
TUNE_EXTRAS = ("psutil", "cloudpickle", "xgboost")
BUILD_TIMEOUT_S = 300


# --------------------------------------------------------------------------------------------------
# babytriton's own Dlight rules
# --------------------------------------------------------------------------------------------------

def _single_block(rule: GPUScheduleRule, func, target):
    """A schedule of `func` and its one block after inlining, or (None, None) when the rule can't apply."""
    if not isinstance(func, tirx.PrimFunc) or not rule.is_target_available(target):
        return None, None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None, None
    infos = try_inline(sch, infos)
    return (sch, infos[0]) if len(infos) == 1 else (None, None)


class Elementwise(GPUScheduleRule):
    """Injective kernels with a static size: each thread moves 16 bytes of every buffer with one
    vector load/store (float4 for float32). Dlight's Fallback moves one scalar per thread, which leaves
    a third of the memory bandwidth unused on large element-wise chains."""

    def __init__(self, threads: int = 256, vector_bytes: int = 16):
        self.threads = threads
        self.vector_bytes = vector_bytes

    def apply(self, func, target, _tunable):
        sch, info = _single_block(self, func, target)
        if sch is None or not info.is_injective():
            return None
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params if _is_buffer(p)), default=4)
        vector = max(self.vector_bytes // widest, 1)
        if _computes_bools(func):  # CUDA has no 8-lane bool type (a float16 compare or NaN test)
            vector = min(vector, 4)
        loops = sch.get_loops(info.block_rv)
        if not loops:
            return None  # a 0-d kernel (loop counters, scalar math): Fallback gives it one thread
        if not _contiguous_lanes(sch, loops[-1], vector):
            return None  # a transpose, slice or gather: Fallback's scalar loads are what it can do
        fused = sch.fuse(*loops)
        extent = sch.get(fused).extent
        if not isinstance(extent, tirx.IntImm) or int(extent) % vector or int(extent) < vector * self.threads:
            return None  # ragged or tiny: Fallback's predicated scalar loop handles it
        blocks, threads, lanes = sch.split(fused, [None, self.threads, vector])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        sch.vectorize(lanes)
        return sch


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
            return None
        if not _reduces_innermost_axis(sch.get(block)):
            return None
        *spatial, r = sch.get_loops(block)
        extent = sch.get(r).extent
        step = self.threads * self.unroll
        if not isinstance(extent, tirx.IntImm) or int(extent) % step:
            return None
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


def _contiguous_lanes(sch, inner_loop, lanes: int) -> bool:
    """Whether `lanes` consecutive, aligned steps of the innermost loop read and write `lanes`
    consecutive, aligned elements of every buffer (or one element, broadcast): only then is one
    vector load or store per buffer the same as the scalar ones (a transposed operand is not)."""
    loop = sch.get(inner_loop)
    realize = loop.body
    if not isinstance(loop.extent, tirx.IntImm) or int(loop.extent) % lanes or not isinstance(
            realize, s_tir.SBlockRealize):
        return False
    block = realize.block
    inner = [iv.var for iv, value in zip(block.iter_vars, realize.iter_values) if value.same_as(loop.loop_var)]
    others = [value for value in realize.iter_values if not value.same_as(loop.loop_var)]
    if len(inner) != 1 or any(_uses(value, loop.loop_var) for value in others):
        return False
    var = inner[0]
    for region in [*block.reads, *block.writes]:
        *outer, last = region.region
        if any(_uses(r.min, var) for r in outer) or not all(_is_int(r.extent, 1) for r in region.region):
            return False
        if not _uses(last.min, var):
            continue  # the same element for every lane: a broadcast
        coeffs = detect_linear_equation(last.min, [var])
        row = region.source.shape[-1]
        if len(coeffs) != 2 or not _is_int(coeffs[0], 1) or not _is_int(coeffs[1], 0) or not (
                isinstance(row, tirx.IntImm) and int(row) % lanes == 0):
            return False
    return True


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(expr))


def _is_int(expr, value: int) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr) == value


def _computes_bools(func) -> bool:
    """Whether a kernel computes a bool anywhere (a compare, a NaN test, a select's condition)."""
    found = []

    def visit(node):
        ty = getattr(node, "ty", None) if isinstance(node, tvm.ir.Expr) else None
        # a constant (a block's `T.bool(True)` predicate) is never a vector of bools
        if isinstance(ty, tvm.ir.PrimType) and str(ty.dtype).startswith("bool") and not isinstance(node, tirx.IntImm):
            found.append(node)
    tvm_ffi.structural_walk(func.body, visit)
    return bool(found)


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


def _is_buffer(param) -> bool:
    try:
        param.ty.dtype
    except AttributeError:
        return False
    return True


class Guarded(dl.ScheduleRule):
    """A Dlight rule that declines a kernel it fails on, so the next rule (or none) takes it: e.g.
    the CPU GEMV rule asserts on a reduction fused after a broadcast (found by the fuzzer)."""

    def __init__(self, rule):
        self.rule = rule

    def apply(self, func, target, tunable):
        try:
            return self.rule.apply(func, target, tunable)
        except Exception:  # noqa: BLE001 - a rule's own bug must not fail the compile
            return None

    def __repr__(self):
        return f"Guarded({type(self.rule).__name__})"


def gpu_rules(schedule: str) -> list:
    if schedule == "fallback":  # the 2024 tutorial: one thread per element, nothing else
        return [dl.gpu.Fallback()]
    return [Guarded(r) for r in (dl.gpu.Matmul(), dl.gpu.GEMV(), RowReduction(), dl.gpu.Reduction(),
                                 dl.gpu.GeneralReduction(), Elementwise())] + [dl.gpu.Fallback()]


def cpu_rules() -> list:
    return [Guarded(dl.cpu.GEMV()), Guarded(dl.cpu.Reduction())]


def apply(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int) -> tvm.IRModule:
    """Schedule every TIR function of a fused module for `target`."""
    gpu = target.kind.name == "cuda"
    if schedule == "meta_schedule":
        mod = meta_schedule(mod, target, trials)
    with target:
        # Dlight skips functions already scheduled (tuned ones); on a GPU everything left needs threads.
        rules = gpu_rules("fallback" if schedule == "meta_schedule" else schedule) if gpu else cpu_rules()
        return dl.ApplyDefaultSchedule(*rules)(mod)


def init_outside_reductions(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every reduction left with its init inside its reduction loops a separate init loop nest.
    TVM lowers such an init to "on the first reduction step", which never comes when a reduced size is
    0 at run time (a symbolic n = 0): the result would be uninitialised memory instead of the sum's 0,
    the product's 1, a matrix product's zeros. Reductions whose loops are bound to GPU threads are
    left to TVM's cross-thread lowering, which starts every thread from the identity."""
    out = mod
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(func)
        for realize in _reductions_with_init(func):
            block = sch.get_sblock(realize.block.name_hint)
            loop = _outermost_reduction_loop(sch, block, realize)
            if loop is not None:
                try:
                    sch.decompose_reduction(block, loop)
                except s_tir.ScheduleError:  # a layout it cannot split (left as scheduled)
                    continue
        if not sch.mod["main"].same_as(func):
            out = out if out is not mod else mod.clone()
            out[gvar] = sch.mod["main"]
    return out


def skip_empty_outputs(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """Run no kernel whose outputs are all empty (a size 0): there is nothing to write, and schedules
    that assume a size of at least 1 read and write out of bounds (on the GPU, `x * 2` of a (0, 4)
    tensor was an illegal memory access). A statically empty kernel loses its body; on the CPU, a
    symbolic size guards the body at run time. (On the GPU such a guard would enclose the kernel's
    thread syncs, which TVM refuses: symbolic sizes of 0 there are not guarded yet.) Kernels with a
    non-empty output still run, so a reduction over an empty axis writes its init."""
    out = mod
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        conditions = [_nonempty(buffer) for buffer in _written_params(func)]
        if not conditions or any(c is True for c in conditions):
            continue
        conditions = [c for c in conditions if c is not False]
        own = func.attrs["target"] if func.attrs is not None and "target" in func.attrs else target
        if conditions and (own is None or own.kind.name != "llvm"):
            continue
        if conditions:
            guard = functools.reduce(tirx.Or, conditions)
            body = lambda stmt: tirx.IfThenElse(guard, stmt, None)  # noqa: E731
        else:
            body = lambda stmt: tirx.Evaluate(0)  # noqa: E731
        root = func.body
        if isinstance(root, s_tir.SBlockRealize):  # the guard goes inside the root block
            block = root.block
            new_block = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint,
                                     body(block.body), block.init,
                                     block.alloc_buffers if conditions else [], block.match_buffers,
                                     block.annotations)
            root = s_tir.SBlockRealize(root.iter_values, root.predicate, new_block)
        else:
            root = body(root)
        out = out if out is not mod else mod.clone()
        out[gvar] = func.with_body(root)
    return out


def _nonempty(buffer):
    """Whether a buffer has elements: True, False, or a run-time condition on its symbolic sizes."""
    sizes = [d for d in buffer.shape if not isinstance(d, tirx.IntImm)]
    if any(isinstance(d, tirx.IntImm) and int(d) == 0 for d in buffer.shape):
        return False
    return functools.reduce(tirx.And, [d > 0 for d in sizes]) if sizes else True


def _written_params(func) -> list:
    written = [region.source for realize in _all(func.body, s_tir.SBlockRealize) for region in realize.block.writes]
    written += [store.buffer for store in _all(func.body, tirx.BufferStore)]
    return [p for p in func.params if tirx.is_buffer_var(p) and any(p.same_as(w) for w in written)]


def _all(node, kind) -> list:
    found = []
    tvm_ffi.structural_walk(node, (kind, found.append))
    return found


def _reductions_with_init(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlockRealize, found.append))
    return [r for r in found if r.block.init is not None]


def _outermost_reduction_loop(sch, block, realize):
    """The outermost loop that steps a reduction variable of the block (None: there is none, or the
    reduction runs across GPU threads)."""
    reduced = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.iter_type == tirx.IterVar.CommReduce:
            reduced |= {v for v in tirx.analysis.undefined_vars(value)}
    loops = [sch.get(rv) for rv in sch.get_loops(block)]
    steps = [i for i, loop in enumerate(loops) if any(loop.loop_var.same_as(v) for v in reduced)]
    if not steps or any(loops[i].thread_binding is not None for i in steps):
        return None
    bound = [i for i, loop in enumerate(loops) if loop.thread_binding is not None]
    if bound and bound[0] > steps[0]:  # the init would leave the kernel for the host
        return None
    return sch.get_loops(block)[steps[0]]


# --------------------------------------------------------------------------------------------------
# matrix products through torch's cuBLAS
# --------------------------------------------------------------------------------------------------

TORCH_MATMUL = "babytriton.torch_matmul"


@tvm.register_global_func(TORCH_MATMUL, override=True)
def _torch_matmul(a, b, out):
    torch.matmul(vm_to_torch(a), vm_to_torch(b), out=vm_to_torch(out))


def _register_transposed(name: str, ta: bool, tb: bool) -> None:
    """A product whose operand(s) arrive untransposed: cuBLAS reads the transposed view directly."""
    def matmul(a, b, out):
        a, b = vm_to_torch(a), vm_to_torch(b)
        torch.matmul(a.mT if ta else a, b.mT if tb else b, out=vm_to_torch(out))
    tvm.register_global_func(name, matmul, override=True)


# transposed operands by suffix: "nt" is a @ b.mT
TORCH_MATMUL_T = {(ta, tb): f"{TORCH_MATMUL}_{'t' if ta else 'n'}{'t' if tb else 'n'}"
                  for ta in (False, True) for tb in (False, True) if ta or tb}
for (_ta, _tb), _name in TORCH_MATMUL_T.items():
    _register_transposed(_name, _ta, _tb)


@relax.expr_functor.mutator
class _MatmulToTorch(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul":
            a, b = call.args
            ok = all(str(x.ty.dtype) in ("float16", "bfloat16", "float32") and x.ty.ndim >= 2 for x in (a, b))
            out_dtype = call.attrs.out_dtype
            if ok and out_dtype in (None, "", str(a.ty.dtype)) and str(a.ty.dtype) == str(b.ty.dtype):
                (a, ta), (b, tb) = self._untransposed(a), self._untransposed(b)
                name = TORCH_MATMUL_T.get((ta, tb), TORCH_MATMUL)
                return relax.op.call_dps_packed(relax.ExternFunc(name), [a, b], call.ty)
        return call

    def _untransposed(self, operand):
        """(x, True) for an operand that is permute_dims(x) swapping its last two axes, else (operand, False):
        torch hands cuBLAS the transposed view, so the transpose needs no kernel of its own."""
        value = self.lookup_binding(operand) if isinstance(operand, relax.Var) else None
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                and value.op.name == "relax.permute_dims"):
            return operand, False
        n = operand.ty.ndim
        axes = value.attrs.axes
        axes = list(range(n))[::-1] if axes is None else [int(x) for x in axes]
        if n < 2 or axes != list(range(n - 2)) + [n - 1, n - 2]:
            return operand, False
        return value.args[0], True


def offloads_matmul(target: tvm.target.Target | None, schedule: str) -> bool:
    """Whether the pipeline hands float matrix products to cuBLAS (which accumulates float16 in float32)."""
    return target is not None and target.kind.name == "cuda" and schedule == "dlight"


def offload_matmul(mod: tvm.IRModule) -> tvm.IRModule:
    """Replace float matrix products by a packed call into torch.matmul (cuBLAS), before legalization."""
    mod = mod.clone()  # passes must not change the module a previous stage recorded
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mutator = _MatmulToTorch(mod)
            mod[gv] = mutator.visit_expr(func)
    return mod


# --------------------------------------------------------------------------------------------------
# MetaSchedule
# --------------------------------------------------------------------------------------------------

def tuning_dir() -> Path:
    from .cache import cache_dir
    return cache_dir() / "meta_schedule"


def require_tuning_extras() -> None:
    missing = [name for name in TUNE_EXTRAS if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"schedule='meta_schedule' needs {', '.join(missing)}: "
                          "pip install 'babytriton[tune]'")


def _tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    config = dict(target.export())
    if config["kind"] == "llvm" and "num-cores" not in config:
        config["num-cores"] = os.cpu_count() or 1  # MetaSchedule refuses a CPU target without it
    return tvm.target.Target(config)


def meta_schedule(mod: tvm.IRModule, target: tvm.target.Target, trials: int) -> tvm.IRModule:
    """Tune the kernels that the database has no record of, then apply the best records."""
    require_tuning_extras()
    from tvm.s_tir import meta_schedule as ms

    target = _tuning_target(target)
    work_dir = tuning_dir() / hashlib.sha256(str(target).encode()).hexdigest()[:16]
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    tasks = ms.relax_integration.extract_tasks(mod, target)
    todo = [t for t in tasks if database.query_tuning_record(t.dispatched[0], target, "main") is None]
    if todo:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(todo, work_dir=str(work_dir))
        per_task = max(trials, 1)
        progress = _progress_bar([t.task_name for t in todo], per_task)
        # MetaSchedule logs every round to stdout; keep that in its log files and show the bar instead.
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.DEBUG if debug_enabled() else logging.WARNING)
        ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=str(work_dir), database=database,
            # each build is a fresh process importing TVM: on a busy 2-core machine that alone can take 30 s
            # each build worker knows babytriton's NaN-propagating reducers (cross-thread reductions look them up)
            builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S, initializer=_register_reducers),
            max_trials_global=per_task * len(todo), max_trials_per_task=per_task,
            num_trials_per_iter=min(8, per_task), cost_model="xgb",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress])
        sys.stderr.write("\n")
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)


def _register_reducers():
    from . import legalize
    legalize.reducers()


def _progress_bar(names: list[str], per_task: int):
    """A one-line progress bar on stderr while MetaSchedule measures candidates."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Progress(PyMeasureCallback):
        def __init__(self):
            self.total = per_task * len(names)
            self.done = 0

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            self.done = min(self.done + len(measure_candidates), self.total)
            width = 30
            filled = width * self.done // max(self.total, 1)
            name = names[task_id] if task_id < len(names) else ""
            sys.stderr.write(f"\r[babytriton] tuning [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} trials  {name[:40]:40s}")
            sys.stderr.flush()

    return Progress()
