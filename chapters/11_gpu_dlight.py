# Chapter 11 - GPU: Dlight schedules the TIR, thread bindings appear
#
# What: `target="gpu"` gets a backend. After LegalizeOps, the TIR loops are
# *scheduled* with Dlight, TVM's library of ready-made GPU schedules, and the
# module is built for a CUDA target. The 2024 tutorial this path follows used
# the single rule `dl.gpu.Fallback()`; the JIT applies a list of rules
# (matmul, GEMV, reductions, then Fallback), and each PrimFunc gets the first
# rule that fits it.
#
# Why: the loop nest from LegalizeOps is a plain sequential loop, fine for a
# CPU. A GPU runs thousands of threads in blocks; somebody has to decide which
# loop iterations each thread does. A schedule does that without changing what
# is computed: here it fuses the two loops into one, splits it, and *binds*
# the parts to `blockIdx.x` (which block) and `threadIdx.x` (which thread in
# the block). Loops without thread bindings give TVM nothing to launch on
# the GPU: it would compile them as ordinary host code. `tvm.compile`'s
# default CUDA pipeline runs Dlight on anything left unscheduled; doing it
# ourselves lets us print the result and choose the rules.
#
# No GPU needed to follow along: building for CUDA only generates CUDA C
# source. Running needs a GPU; when `tvm.cuda()` and torch both see one, the
# chapter runs the function there and compares it with torch, using the
# undecorated Python function on torch tensors as the reference. Otherwise it
# builds for sm_90 (Hopper: H100, H200) and says that it did not run.
#
# What to look at: `T.thread_binding(..., thread="blockIdx.x")` and
# `T.thread_binding(..., thread="threadIdx.x")` in the scheduled TIR, the
# `T.where` guard that keeps the extra threads from writing past 6 elements,
# and the attribute `tirx.is_scheduled`.
#
# Run: python chapters/11_gpu_dlight.py
import importlib
import inspect

import torch
import tvm
from tvm.s_tir import dlight as dl

ch10 = importlib.import_module("10_tensor_params")
Tensor = ch10.Tensor


def has_gpu():
    """TVM must be able to launch on a CUDA device, and torch must be able to put inputs there."""
    return tvm.cuda().exist and torch.cuda.is_available()


class JIT(ch10.JIT):
    def tvm_target(self):
        if self.target != "gpu":
            return super().tvm_target()
        if has_gpu():
            return tvm.target.Target.from_device(tvm.cuda())
        # Without a GPU nothing can be detected; name the architecture (a bare "cuda" means sm_50,
        # which current nvcc rejects).
        return tvm.target.Target({"kind": "cuda", "arch": "sm_90"})

    def device(self):
        return tvm.cuda() if self.target == "gpu" else super().device()

    def schedule_rules(self):
        # Tried in order; Fallback fits any PrimFunc, so it comes last.
        return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                dl.gpu.Fallback()]

    def schedule(self, mod, rules=None):
        # Dlight reads the target from the context; ApplyDefaultSchedule edits its input in place.
        with self.tvm_target():
            return dl.ApplyDefaultSchedule(*(rules or self.schedule_rules()))(mod.clone())

    def compile(self):
        mod = self.lower(self.codegen())
        if self.target == "gpu":
            mod = self.schedule(mod)
        return self.build(mod)


jit = JIT.decorator


def run_if_gpu(jitted):
    """Run `jitted` on the GPU, checked against its own Python body run by torch; or, without a GPU,
    only build it."""
    name = jitted.fn.__name__
    if not has_gpu():
        jitted.executable  # the first access to the property builds it
        target = jitted.tvm_target()
        arch = target.attrs["arch"]
        print(f"No CUDA GPU here: {name} was built for {target.kind.name} {arch}, not run.")
        return
    inputs = [torch.rand(ann.shape, dtype=getattr(torch, ann.dtype), device="cuda")
              for ann in inspect.get_annotations(jitted.fn).values()]
    torch.testing.assert_close(jitted(*map(Tensor.of, inputs)), jitted.fn(*inputs))
    print(f"{name} ran on {torch.cuda.get_device_name()} and matches torch.")


if __name__ == "__main__":

    @jit(target="gpu")
    def add_tensors(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a + b

    lowered = add_tensors.lower(add_tensors.codegen())
    print("TIR from LegalizeOps, not yet scheduled:")
    print(lowered["add"].script(name="add"))

    fallback = add_tensors.schedule(lowered, [dl.gpu.Fallback()])
    scheduled = fallback["add"].script(name="add")
    print("\nAfter dlight with dl.gpu.Fallback():")
    print(scheduled)

    full = add_tensors.schedule(lowered)
    same = full.script() == fallback.script()
    print(f"\nWith the JIT's full rule set the schedule is the same: {same} "
          "(an elementwise add is no matmul or reduction, so Fallback is the rule that fits)\n")

    run_if_gpu(add_tensors)

    print("Checking: Dlight bound the loops to GPU blocks and threads")
    assert 'thread="blockIdx.x"' in scheduled and 'thread="threadIdx.x"' in scheduled
    assert "thread_binding" not in lowered.script()
    assert same
