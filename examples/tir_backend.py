# The TensorIR backend: loops in, one TIR PrimFunc out
#
# What: `@bt.jit(backend="tir")` compiles loop-level Python (for loops over range, subscripts,
# scalar locals, `if`, math functions) straight into one TIR PrimFunc with TVM's TIR IRBuilder.
# There is no Relax, no operator fusion, no Dlight: the loops you write are the loops that run.
# Results are written into parameters (destination passing, as in C or CUDA); a call returns the
# parameters the function writes (one tensor, or a tuple of them).
#
# Why: the Relax backend works on whole tensors and lets TVM decide the loops. Some computations
# are easier to say as loops (a softmax that walks a row three times, a scan, a stencil), and
# seeing the TIR that your own loops become is the best way to read what Relax generates for you.
#
# Parallelism is explicit: `for i in bt.parallel(n)` promises that the iterations are independent.
# On the CPU the loop runs on torch's CPU threads; on the GPU it becomes a kernel with one thread per
# iteration (a nest of bt.parallel loops becomes one kernel over all of its iterations). Everything
# else runs in order: on a GPU as one-thread kernels, launched in program order.
#
# What to look at: the "tir" stage (your loops, with `acc: T.float32` for a scalar local that
# changes in a loop), the "schedule" stage (where bt.parallel went), and the compile-time bounds
# error at the end.
#
# Run: python examples/tir_backend.py
import math

import torch
import tvm

import babytriton as bt


# 1. The simplest function: c = a + b, written into c.
@bt.jit(target="cpu", backend="tir")
def add(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32"), c: bt.Tensor((2, 3), "float32")):
    for i in range(2):
        for j in range(3):
            c[i, j] = a[i, j] + b[i, j]


a, b = torch.randn(2, 3), torch.randn(2, 3)
c = torch.empty(2, 3)
assert add(a, b, c) is c                       # written in place, and returned
torch.testing.assert_close(c, a + b)
print(add.compile().stages["tir"])


# 2. A row softmax: three passes over each row, rows in parallel. `row_max` and `total` are
#    scalar locals; symbolic sizes ("n", "m") give one compiled version for every shape.
@bt.jit(backend="tir")
def softmax(x: bt.Tensor(("n", "m"), "float32"), y: bt.Tensor(("n", "m"), "float32")):
    for i in bt.parallel(x.shape[0]):
        row_max = x[i, 0]
        for j in range(1, x.shape[1]):
            row_max = max(row_max, x[i, j])
        total = 0.0
        for j in range(x.shape[1]):
            e = math.exp(x[i, j] - row_max)
            y[i, j] = e
            total += e
        for j in range(x.shape[1]):
            y[i, j] = y[i, j] / total


for shape in [(4, 10), (33, 7)]:
    x = torch.randn(*shape) * 5
    torch.testing.assert_close(softmax(x, torch.empty(*shape)), torch.softmax(x, dim=1))
kernel = softmax.compile(x, torch.empty_like(x))
print(kernel.stages["tir"])
assert softmax.cache_info()["versions"] == 1   # one version for both shapes (compiled now or found on disk)


# 3. A naive matmul, the (i, j) nest in parallel: on the CPU the two loops are fused into one
#    thread-pool loop (TVM runs one level of CPU parallelism).
@bt.jit(backend="tir")
def matmul(p: bt.Tensor(("n", "k"), "float32"), q: bt.Tensor(("k", "m"), "float32"),
           r: bt.Tensor(("n", "m"), "float32")):
    for i in bt.parallel(p.shape[0]):
        for j in bt.parallel(q.shape[1]):
            acc = 0.0
            for k in range(p.shape[1]):
                acc += p[i, k] * q[k, j]
            r[i, j] = acc


p, q = torch.randn(20, 30), torch.randn(30, 10)
torch.testing.assert_close(matmul(p, q, torch.empty(20, 10)), p @ q, atol=1e-5, rtol=1e-5)
print(matmul.compile(p, q, torch.empty(20, 10)).stages["schedule"])


# 4. The same matmul for a GPU. Building CUDA needs no GPU (only running it does): the schedule
#    binds the fused (i, j) iterations to blockIdx.x * 256 + threadIdx.x.
gpu_matmul = bt.jit(matmul.fn, backend="tir", target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
gpu_kernel = gpu_matmul.compile()
print(gpu_kernel.stages["schedule"])
assert 'thread="blockIdx.x"' in gpu_kernel.stages["schedule"] and "__global__" in gpu_kernel.source
if torch.cuda.is_available() and tvm.cuda().exist:
    on_gpu = bt.jit(matmul.fn, backend="tir", target="gpu")
    pc, qc = p.cuda(), q.cuda()
    torch.testing.assert_close(on_gpu(pc, qc, torch.empty(20, 10, device="cuda")), pc @ qc, atol=1e-4, rtol=1e-4)
    print("ran on the GPU")


# 5. An index that must leave a static shape is a compile-time error, at the subscript.
def off_by_one(v: bt.Tensor((4,), "float32"), w: bt.Tensor((4,), "float32")):
    for i in range(4):
        w[i] = v[i + 1]


try:
    bt.jit(off_by_one, backend="tir").compile()
    raise AssertionError("expected a CompilationError")
except bt.CompilationError as err:
    print(err)
    assert "reaches 4, out of bounds for dimension 0 of 'v' (size 4)" in err.message
