# Device blocks: one function, some of it on the CPU, some on the GPU
#
# What: inside a @jit function, `with bt.device("cpu"):` and `with bt.device("gpu"):` choose where
# the block's operations run. The compiler gives every Relax value a virtual device ("vdevice"),
# inserts `R.to_vdevice` copies wherever a value is used on the other device, fuses the operations
# of each device separately, compiles the CPU kernels with LLVM and the GPU ones to CUDA, and runs
# the whole function in one Relax VM that holds both devices.
#
# Where things live:
# - operations outside every block run on the function's target device;
# - a tensor argument stays where the caller put it (CPU or CUDA; each placement is its own
#   compiled version) and is copied to a block's device when the block uses it, once;
# - a returned variable comes back on the device of the block holding its last assignment; a
#   variable assigned outside every block, a parameter, or an expression written in the `return`
#   comes back on the target's device; a `return` inside a block returns on that block's device.
#
# Why: some work belongs on the host (small, branchy, or already there: the data just came from a
# file), some on the GPU. Writing the copies by hand is error-prone; here they follow from the
# blocks, and the stages show exactly which copies were made.
#
# What to look at: `vdevice="llvm:0:global"` / `vdevice="cuda:0:global"` on every value in the
# "relax" stage, the `R.to_vdevice` bindings named `<value>_cpu` / `<value>_gpu`, the fused kernels
# named `..._llvm` and `..._cuda` after FuseTIR, and the LLVM and CUDA parts of `.source`.
#
# No GPU is needed to build; running the GPU part needs one (the script checks torch and TVM).
#
# Run: python examples/device_blocks.py
import re

import torch
import tvm

import babytriton as bt


def features(raw: bt.Tensor(("n", 8), "float32"), w: bt.Tensor((8, 4), "float32"), scale: float):
    with bt.device("cpu"):                 # cheap, elementwise clean-up next to the data
        x = raw * scale
        x = x if x > 0.0 else 0.0
    with bt.device("gpu"):                 # the matmul and what follows it on the GPU
        h = x @ w
        h = h * h + 1.0
    return h, x


has_gpu = torch.cuda.is_available() and tvm.cuda().exist
target = "gpu" if has_gpu else tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
f = bt.jit(features, target=target)

# Compile for CPU arguments (data loaded on the host) and look at the stages.
raw, w = torch.randn(16, 8), torch.randn(8, 4)
kernel = f.compile(raw, w, 0.5)
relax_fn = kernel.stages["relax"].split("@R.function")[-1]
print(relax_fn)
copies = re.findall(r"(\w+): R\.Tensor\([^)]*\), dtype=\"float32\", vdevice=\"(\w+):0:global\"\) = R\.to_vdevice",
                    relax_fn)
print("copies made by the compiler:", copies)
assert ("x_gpu", "cuda") in copies and ("w_gpu", "cuda") in copies
fused = kernel.stages["FuseTIR"].split("@R.function")[-1]
kernels = re.findall(r"R\.call_tir\(cls\.(\w+)", fused)
print("kernels after fusion:", kernels)
assert any(k.endswith("_llvm") for k in kernels) and any(k.endswith("_cuda") for k in kernels)
assert "// ===== llvm =====" in kernel.source and "__global__" in kernel.source

if has_gpu:
    h, x = f(raw, w, 0.5)                                     # CPU arguments
    assert h.is_cuda and not x.is_cuda                        # h: GPU block; x: CPU block
    x_ref = torch.relu(raw * 0.5)
    h_ref = (x_ref @ w) ** 2 + 1.0
    torch.testing.assert_close(x, x_ref)
    torch.testing.assert_close(h.cpu(), h_ref, rtol=1e-4, atol=1e-4)
    h2, x2 = f(raw.cuda(), w.cuda(), 0.5)                     # CUDA arguments: another version
    torch.testing.assert_close(h2.cpu(), h_ref, rtol=1e-4, atol=1e-4)
    print("ran on the CPU and the GPU")
else:
    print("no GPU here: built, not run")

# A function whose blocks are all on the CPU runs anywhere: the same machinery, one vdevice.


@bt.jit(target="cpu")
def host_only(a: bt.Tensor(("n",), "float32"), b: bt.Tensor(("n",), "float32")):
    with bt.device("cpu"):
        s = a * 2.0 + b
    return s * s


a, b = torch.randn(10), torch.randn(10)
torch.testing.assert_close(host_only(a, b), (a * 2 + b) ** 2)
assert 'vdevice="llvm:0:global"' in host_only.compile(a, b).stages["relax"]
