# Exercise starter for chapter 15 - MetaSchedule: search for a schedule instead of picking one
#
# Exercise 2 of the tutorial (MetaSchedule instead of Dlight), to solve on chapter 13. Fill in the
# functions that raise NotImplementedError("exercise 2 ..."); the comments below say what the
# finished chapter does. Check your answer with `pytest exercises -k 15_meta_schedule`; the solution
# is chapters/15_meta_schedule.py, and `diff exercises/15_meta_schedule.py
# chapters/15_meta_schedule.py` shows it.
#
# What: `@jit(schedule="meta_schedule", trials=4)` schedules the fused TIR
# with TVM's auto-tuner, MetaSchedule, instead of Dlight's rules. For each
# kernel, MetaSchedule builds a *design space*: a template schedule (tile
# the loops, bind tiles to blocks and threads, stage inputs in shared memory,
# unroll, vectorise) whose choices (tile sizes, unroll depth, ...) are left
# open. It samples candidates from that space, compiles each one, runs it
# on the real hardware, and keeps the fastest in a database. The tuned TIR
# is then applied from the database, and the module is built as before.
#
# Why: Dlight's rules are hand-written and apply in milliseconds; each rule
# knows one kind of kernel (matmul, reduction, elementwise) and picks its
# sizes by formula. MetaSchedule knows nothing about the kernel's kind, but
# it measures: with enough trials it finds schedules no rule would write, at
# the price of minutes of tuning (hours, for a whole model). Measuring needs
# the hardware: a CUDA schedule can only be tuned on a GPU.
#
# This chapter keeps the tuning tiny, so that it runs in seconds on two
# CPU cores: one 32x32 matmul-plus-add and 4 trials, drawn by random
# search ("replay-trace": each trial replays the design space with fresh
# random choices). MetaSchedule's default search is evolutionary: it
# samples and mutates hundreds of candidates per round and lets a cost
# model ("xgb", trained on the measurements) pick which to measure; 4
# measurements teach a model nothing, and those rounds took longer than
# this whole chapter does now. Its builder and runner are pluggable too:
# the default ones compile and time candidates in worker processes (builds
# in parallel, and a candidate that crashes cannot take the tuner down),
# each a fresh Python importing TVM, longer than building four small
# kernels; ours (`InProcessBuilder`, `InProcessRunner`) do both right
# here. And MetaSchedule's first use imports TVM's tensor intrinsics
# (tensor-core instructions and the like) for every kind of hardware,
# hundreds of TVMScript functions: over a minute. A schedule can only use
# its own target's, and a float32 kernel on a plain CPU none:
# `import_tensor_intrinsics` imports just those.
#
# Without a GPU, the CUDA part cannot measure anything, so it stops short
# of tuning: it asks MetaSchedule for one candidate from the design space
# (random choices, checked by MetaSchedule's postprocessors, exactly what
# it would send to the GPU first) and compares that with Dlight's schedule.
# With a GPU, the chapter tunes for CUDA for real and runs the result.
#
# What to look at: on the CPU, the four measured candidates and their times,
# then the tuned TIR: a tiled loop nest (`T.vectorized`, `T.unroll`, and
# `T.parallel` when the parallel candidate measured fastest) where
# LegalizeOps wrote three plain loops. For CUDA, Dlight's TIR and
# MetaSchedule's one after the other: both bind `blockIdx.x`/`threadIdx.x`
# and stage tiles of `a` and `b` in `shared` memory, with different tile
# sizes and thread counts; then the start of each CUDA kernel, and a summary
# of the two (threads per block, shared buffers, length of the code: Dlight
# unrolls its inner loops completely).
#
# Run: python exercises/15_meta_schedule.py
import ast
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
import tempfile

import numpy as np
import torch
import tvm
from tvm import relax as rx
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

import pathlib  # the starter's own lines: chapter 13 is in chapters/, beside exercises/
import sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor
ch12 = ch13.ch12
has_gpu, run_if_gpu, kernel_names = ch12.ch11.has_gpu, ch12.run_if_gpu, ch12.kernel_names
SCHEDULES = ("dlight", "meta_schedule")


@derived_object
class InProcessBuilder(ms.builder.PyBuilder):
    """Compiles each candidate in this process, as MetaSchedule's LocalBuilder does in its workers;
    the runner finds the compiled module under the name the result gives it."""

    def __init__(self):
        super().__init__()
        self.built = {}

    def build(self, build_inputs):
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
        results = []
        for build_input in build_inputs:
            name = f"candidate {len(self.built)}"
            try:
                mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(build_input.mod)
                self.built[name] = tvm.tirx.build(mod, target=build_input.target)
                results.append(ms.builder.BuilderResult(name, None))
            except Exception as error:  # a candidate that does not build is recorded, not fatal
                results.append(ms.builder.BuilderResult(None, f"{type(error).__name__}: {error}"))
        return results


@derived_object
class InProcessRunner(ms.runner.PyRunner):
    """Times each built candidate in this process on random inputs, as LocalRunner does in its worker:
    MetaSchedule's default EvaluatorConfig (a warm-up, then 3 runs per repeat, repeats of >= 100 ms)."""

    def __init__(self, builder):
        super().__init__()
        self.builder = builder

    def run(self, runner_inputs):
        return [self.measure(runner_input) for runner_input in runner_inputs]

    def measure(self, runner_input):
        config = ms.runner.EvaluatorConfig()
        lib = self.builder.built.pop(runner_input.artifact_path)
        device = tvm.device({"llvm": "cpu"}.get(runner_input.device_type, runner_input.device_type))
        try:
            args = [tvm.runtime.tensor(np.random.rand(*shape).astype(dtype), device)
                    for _, dtype, shape in (arg.as_json() for arg in runner_input.args_info)]
            timer = lib.time_evaluator(lib.entry_name, device, number=config.number, repeat=config.repeat,
                                       min_repeat_ms=config.min_repeat_ms)
            return ms.runner.LocalRunnerFuture(list(timer(*args).results))
        except Exception as error:  # as a failed run in a worker: recorded, not fatal
            return ms.runner.LocalRunnerFuture(None, f"{type(error).__name__}: {error}")


@functools.cache
def import_tensor_intrinsics(kind):
    """Register the tensor intrinsics a `kind` target's schedule rules can use (CUDA's tensor-core rules
    need CUDA's; a plain CPU target uses none), where MetaSchedule imports every kind's. The package is
    entered in sys.modules unexecuted, so that MetaSchedule's own import of it is a no-op. And
    parsing each TVMScript function calls inspect.stack(), whose module lookup scans all of sys.modules
    for every frame: a frame's module is its file's, so the lookups are memoised meanwhile."""
    package = "tvm.s_tir.tensor_intrin"
    if package not in sys.modules:
        sys.modules[package] = importlib.util.module_from_spec(importlib.util.find_spec(package))
    if importlib.util.find_spec(f"{package}.{kind}") is None:
        return
    lookup, modules = inspect.getmodule, {}

    def by_file(obj, filename=None):
        if filename is None or not (inspect.isframe(obj) or inspect.iscode(obj)):
            return lookup(obj, filename)
        if filename not in modules:
            modules[filename] = lookup(obj, filename)
        return modules[filename]

    inspect.getmodule = by_file
    try:
        __import__(f"{package}.{kind}")  # importing the module registers them
    finally:
        inspect.getmodule = lookup


# ---- Follow-up, beyond the lesson: chapter 13 knows only `+`, and a matmul is what is worth tuning.
# Chapter 14 has every operator; this is just `@`.
class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            return rx.op.matmul(self.visit(node.left), self.visit(node.right))
        return super().visit_BinOp(node)
# ---- end of the follow-up


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    def __init__(self, fn, target="cpu", schedule="dlight", trials=4):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
        super().__init__(fn, target=target)
        self.schedule_name = schedule
        self.trials = trials
        self.records = []  # what tuning measured: (candidate's trace, seconds per run)
        self.scheduled = None  # the module as it was built, after scheduling

    @classmethod
    def decorator(cls, fn=None, *, target="cpu", schedule="dlight", trials=4):
        if fn is None:
            return functools.partial(cls, target=target, schedule=schedule, trials=trials)
        return cls(fn, target=target, schedule=schedule, trials=trials)

    def tuning_target(self):
        """MetaSchedule needs the hardware's limits in the target: how many cores (CPU), how many
        threads and how much shared memory per block (GPU). A detected GPU target has them."""
        if self.target == "gpu":
            if has_gpu():
                return self.tvm_target()
            return tvm.target.Target({"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                                      "max_shared_memory_per_block": 49152, "thread_warp_size": 32})
        return tvm.target.Target({"kind": "llvm", "num-cores": os.cpu_count() or 1})

    def schedule(self, mod, rules=None):
        if self.schedule_name == "dlight" or rules is not None:
            return super().schedule(mod, rules)
        import_tensor_intrinsics(self.tuning_target().kind.name)
        if self.target == "gpu" and not has_gpu():
            return self.sample(mod)
        return self.tune(mod)

    def compile(self):
        mod = self.lower(self.codegen())
        if self.target == "gpu" or self.schedule_name == "meta_schedule":
            mod = self.schedule(mod)
        self.scheduled = mod
        return self.build(mod)

    def tune(self, mod):
        """Measure `trials` candidates of each kernel on this machine; apply the fastest."""
        raise NotImplementedError("exercise 2 (MetaSchedule instead of Dlight): JIT.tune")

    def sample(self, mod):
        """One candidate per kernel, as MetaSchedule would send it to be measured first: a random
        point of the design space that passed the postprocessors' checks. Nothing is measured."""
        raise NotImplementedError("exercise 2 (MetaSchedule instead of Dlight): JIT.sample")

    def build(self, mod):
        if self.target == "gpu" and not has_gpu() and self.schedule_name == "meta_schedule":
            return tvm.compile(mod, target=self.tuning_target())  # the target the sample was made for
        return super().build(mod)


jit = JIT.decorator


def kernel_summary(cuda_source):
    """What a CUDA kernel's schedule comes down to: threads per block, and on-chip buffers."""
    threads = re.findall(r"__launch_bounds__\((\d+)\)", cuda_source)
    shared = re.findall(r"__shared__ (?:alignas\(\d+\) )?(\w+) (\w+)\[(\d+)\]", cuda_source)
    return {"threads per block": threads[0] if threads else "?",
            "shared memory": ", ".join(f"{name}[{n}]" for _, name, n in shared) or "none",
            "lines of CUDA": cuda_source[cuda_source.index('extern "C"'):].count("\n")}


if __name__ == "__main__":

    def matmul_add(a: Tensor((32, 32), "float32"), b: Tensor((32, 32), "float32")):
        return a @ b + 1.0

    # 1. Tuning on this machine's CPU: measured for real.
    tuned = jit(matmul_add, schedule="meta_schedule", trials=4)
    a, b = torch.rand(32, 32), torch.rand(32, 32)
    out = tuned(Tensor.of(a), Tensor.of(b))  # the first call tunes, then builds
    print(f"MetaSchedule measured {len(tuned.records)} CPU candidates:")
    for _, seconds in tuned.records:
        print(f"  {seconds * 1e6:8.2f} us")
    torch.testing.assert_close(out, a @ b + 1.0)
    print("The tuned CPU kernel matches torch.\n")
    cpu_tir = tuned.scheduled["fused_matmul_add"].script(name="fused_matmul_add")
    print("The tuned TIR for the CPU (the fastest candidate, as the database applies it):")
    print(cpu_tir)

    # 2. CUDA: Dlight's schedule next to MetaSchedule's.
    by_dlight = jit(matmul_add, target="gpu")
    by_ms = jit(matmul_add, target="gpu", schedule="meta_schedule", trials=4)
    sources = {"Dlight": by_dlight.cuda_source(), "MetaSchedule": by_ms.cuda_source()}  # builds both
    dlight_tir = by_dlight.scheduled["fused_matmul_add"].script(name="fused_matmul_add")
    ms_tir = by_ms.scheduled["fused_matmul_add"].script(name="fused_matmul_add")
    how = "tuned on this GPU" if has_gpu() else "one unmeasured candidate (no GPU here to measure on)"
    print("\n========== CUDA schedule by Dlight (the Matmul rule) ==========")
    print(dlight_tir)
    print(f"\n========== CUDA schedule by MetaSchedule: {how} ==========")
    print(ms_tir)
    for name, src in sources.items():
        lines = src[src.index('extern "C"'):].splitlines()
        print(f"\n========== CUDA kernel from {name}: the first 16 of {len(lines)} lines ==========")
        print("\n".join(lines[:16]))
    summaries = {name: kernel_summary(src) for name, src in sources.items()}
    print(f"\n{'':18s}  {'Dlight':56s}  MetaSchedule")
    for key in summaries["Dlight"]:
        print(f"{key:18s}  {summaries['Dlight'][key]!s:56s}  {summaries['MetaSchedule'][key]}")
    for jitted in (by_dlight, by_ms):
        run_if_gpu(jitted)

    print("Checking: MetaSchedule scheduled the CPU and the CUDA kernel; both CUDA kernels use threads")
    # which candidate measures fastest varies from run to run; every one of them is a tiled schedule
    assert len(tuned.records) == 4 and any(f"T.{k}" in cpu_tir for k in ("parallel", "vectorized", "unroll"))
    assert "tirx.is_scheduled" in ms_tir and ms_tir != dlight_tir
    assert all('thread="threadIdx.x"' in tir for tir in (dlight_tir, ms_tir))
    assert all(kernel_names(src) == ["fused_matmul_add_kernel"] for src in sources.values())
