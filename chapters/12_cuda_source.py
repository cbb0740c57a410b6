# Chapter 12 - print the CUDA source
#
# What: after the build of chapter 11, the executable holds the generated
# CUDA C, and `cuda_source()` pulls it out. The executable is a tree of
# modules: the Relax VM program at the root, under it the host code compiled
# by LLVM (it launches the kernels), and under that the CUDA module with the
# device code, where `inspect_source()` returns the text.
#
# Why: this is the end of the road from a Python `a + b` to GPU code, and it
# is worth reading once. Everything the schedule decided is visible in plain
# C: the blockIdx/threadIdx loops of chapter 11 have become the built-in
# thread indices, the `T.where` guard has become an `if`, and the 2x3 tensors
# have become flat pointers with computed offsets. TVM does not compile this C
# at build time; the CUDA driver's compiler does it when the module is loaded
# on a GPU. To show that it is real CUDA without a GPU, the chapter hands it
# to nvcc when nvcc is installed and lists the kernel entry points in the PTX.
#
# What to look at: `extern "C" __global__ void __launch_bounds__(1024)
# add_kernel(float* __restrict__ T_add_ptr, ...)` (declared once, then
# defined), one thread per element, and the `if (threadIdx.x < 6)` guard.
# The lines above the kernel are a portable preamble (integer types, macros)
# that every TVM CUDA file starts with; the chapter skips them.
#
# Run: python chapters/12_cuda_source.py
import importlib
import re
import shutil

import tvm.support.nvcc

ch11 = importlib.import_module("11_gpu_dlight")
Tensor = ch11.Tensor
run_if_gpu = ch11.run_if_gpu


def kernel_names(cuda_source):
    return sorted(set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", cuda_source)))


class JIT(ch11.JIT):
    def cuda_source(self):
        if self.target != "gpu":
            raise ValueError(f"{self.fn.__name__} is compiled for {self.target!r}: no CUDA source")
        vm_module = self.executable.mod
        host_module = vm_module.imports[0]
        return host_module.imports[0].inspect_source()


jit = JIT.decorator


if __name__ == "__main__":

    @jit(target="gpu")
    def add_tensors(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a + b

    src = add_tensors.cuda_source()
    mod = add_tensors.executable.mod
    print(f"module tree: {mod.kind} -> {mod.imports[0].kind} -> {mod.imports[0].imports[0].kind}\n")
    kernel_start = src.index('extern "C"')
    print(f"// ... {src[:kernel_start].count(chr(10))} lines of preamble skipped ...")
    print(src[kernel_start:])

    kernels = kernel_names(src)
    print("kernels:", kernels)
    if shutil.which("nvcc"):
        with add_tensors.tvm_target():  # nvcc reads the architecture from the current target
            ptx = tvm.support.nvcc.compile_cuda(src, target_format="ptx", compiler="nvcc").decode()
        print("nvcc compiled it to PTX; entry points:", re.findall(r"\.entry (\w+)", ptx))
    else:
        print("(nvcc not found, so the source was not compiled)")

    run_if_gpu(add_tensors)

    print("Checking: one CUDA kernel, add_kernel, generated for a + b")
    assert 'extern "C" __global__' in src
    assert kernels == ["add_kernel"]
