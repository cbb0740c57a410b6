# Chapter 13 - fusion: two adds become one kernel
#
# What: `d = a + b; return d + c` has produced two kernels so far, one per
# `+`. Four more passes around LegalizeOps fuse them into one:
#   1. ConvertToDataflow wraps the side-effect-free bindings in an
#      `R.dataflow()` block. Fusion only looks inside such blocks, and our
#      IRBuilder code never creates them, so without this step nothing fuses.
#   2. LegalizeOps (chapter 10) turns each `R.add` into a TIR PrimFunc.
#   3. AnnotateTIROpPattern reads each PrimFunc and records what kind of loop
#      nest it is: `"op_pattern": 0` means elementwise, the easiest to fuse.
#   4. FuseOps groups neighbouring calls whose patterns allow it into a new
#      Relax function, `fused_add_add`, marked `"Primitive": True`.
#   5. FuseTIR merges the PrimFuncs called by that group into a single
#      PrimFunc of the same name, and drops the ones no longer used.
#
# Why: on a GPU each kernel launch costs time, and between two kernels the
# intermediate `d` makes a round trip through global memory. In the fused
# kernel each thread reads a, b and c once, keeps a + b in a register, and
# writes only the final result. For elementwise chains like this, that is
# most of the run time saved. (The fused PrimFunc still stores a + b in an
# intermediate buffer; Dlight's schedule inlines it, so in the CUDA code `d`
# never reaches memory.)
#
# What to look at: in the IR after each pass, watch `R.dataflow()` appear,
# then `call_tir` to `add` twice, then `op_pattern`, then the grouped call to
# `fused_add_add`, then a single `call_tir(cls.fused_add_add, (a, b, c), ...)`.
# At the end the CUDA source has one kernel, `fused_add_add_kernel`, with
# `a + b + c` in one expression, and the VM program launches one kernel per
# call where chapter 12's JIT launches `add` twice. The fused module also runs
# on the CPU, to show that fusion did not change the answer.
#
# Run: python chapters/13_fusion.py
import importlib
import re

import torch
from tvm import relax as rx

ch12 = importlib.import_module("12_cuda_source")
Tensor = ch12.Tensor


class JIT(ch12.JIT):
    def passes(self):
        return [rx.transform.ConvertToDataflow(), *super().passes(),
                rx.transform.AnnotateTIROpPattern(), rx.transform.FuseOps(), rx.transform.FuseTIR()]


jit = JIT.decorator


def launches(jitted):
    """The compiled functions that the VM program calls, in order (VM builtins left out)."""
    calls = re.findall(r"call\s+(\S+)\s+in:", jitted.executable.as_text())
    return [c for c in calls if not c.startswith("vm.builtin.")]


def pass_name(p):
    # ConvertToDataflow comes wrapped in an unnamed Sequential (it tidies the bindings afterwards).
    return p.passes[0].info.name if p.info.name == "sequential" else p.info.name


if __name__ == "__main__":

    @jit(target="gpu")
    def add3(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32"), c: Tensor((2, 3), "float32")):
        d = a + b
        return d + c

    mod = add3.codegen()
    print("Relax, as generated:")
    print(mod.script())
    for p in add3.passes():
        mod = p(mod)
        print(f"\n========== after {pass_name(p)} ==========")
        print(mod.script())

    src = add3.cuda_source()
    kernel_start = src.index('extern "C"')
    print("\n========== CUDA source (preamble skipped) ==========")
    print(src[kernel_start:])
    kernels = ch12.kernel_names(src)
    print("kernels:", kernels)
    unfused, fused = launches(ch12.JIT(add3.fn, target="gpu")), launches(add3)
    print(f"kernel launches per call: {unfused} with chapter 12's JIT, {fused} with fusion\n")

    ch12.run_if_gpu(add3)

    inputs = [torch.rand(2, 3) for _ in range(3)]
    on_cpu = JIT(add3.fn)  # the same passes, built with LLVM
    torch.testing.assert_close(on_cpu(*map(Tensor.of, inputs)), add3.fn(*inputs))
    print("The fused module, built for the CPU, matches torch.")

    print("Checking: two adds, one PrimFunc, one CUDA kernel: fused_add_add")
    assert [gv.name_hint for gv in mod.get_global_vars()] == ["add3", "fused_add_add"]
    assert kernels == ["fused_add_add_kernel"]
    assert unfused == ["add", "add"] and fused == ["fused_add_add"]
