"""Rows read once (babytriton/schedules/kept_rows.py): where several passes of an InnerReduction kernel
(a norm's mean, its variance, its output; KL divergence's two softmaxes) read the same input along the
row, each thread copies its vectors of the row into registers once and every pass reads them there.
Here: the CUDA built for sm_90 (every global read of a kept input is one vector into its register copy,
nvcc keeps it in registers), the rows too wide or ragged to keep (read as before), the programs against
torch on the CPU, and, marked gpu, against torch on a GPU (NaN/inf, half dtypes, ragged and empty)."""
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
import tvm
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import babytriton as bt
from babytriton import schedules
from babytriton.schedules import THREAD_AXIS, kept_rows

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")


def layer_norm(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5)


def instance_norm(x):
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = x.var(dim=(2, 3), keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + 1e-5)


def kl_rows(student, teacher):
    log_p = F.log_softmax(student / 2.0, dim=-1)
    q = F.softmax(teacher / 2.0, dim=-1)
    return (q * (torch.log(q) - log_p)).sum(-1)


def centred(x):
    """A row's mean and the centred row: a kernel result that is a row statistic too."""
    mean = x.mean(-1, keepdim=True)
    return mean, x - mean


def group_norm(x, weight, bias):
    n, c, h, w = x.shape
    g = x.reshape(n, 4, -1)
    mean = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    g = (g - mean) / torch.sqrt(var + 1e-5)
    return g.reshape(n, c, h, w) * weight[None, :, None, None] + bias[None, :, None, None]


def compile_sm90(fn, *shapes, dtype=torch.float32):
    return bt.jit(target=SM90)(fn).compile(*(torch.empty(s, dtype=dtype, device="meta") for s in shapes))


def row_kernel(k):
    (kernel,) = [kernel for kernel in k.fusion if kernel.rule == "InnerReduction"]
    return kernel


def kernel_body(k, kernel) -> str:
    name = kernel.cuda_kernels[0]
    start = k.source.index(" {\n", k.source.rindex(f" {name}("))
    return k.source[start:k.source.index("\n}\n", start)]


def global_reads(body: str, param: str) -> list[str]:
    return [line for line in body.splitlines() if f"{param}_ptr" in line]


def ptxas_stack(source: str) -> str:
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", os.devnull],
                         input=source, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


# (program, input shapes, dtype, inputs kept, lanes of one load, threads per row)
KEPT = [
    (instance_norm, [(16, 256, 64, 64)], torch.float32, ["x"], 4, 256),
    (instance_norm, [(4, 256, 64, 64)], torch.float16, ["x"], 4, 256),
    (instance_norm, [(4, 256, 64, 64)], torch.bfloat16, ["x"], 4, 256),
    (instance_norm, [(16, 32, 128, 256)], torch.float32, ["x"], 4, 1024),   # long rows: 1024 threads
    (kl_rows, [(8192, 4096), (8192, 4096)], torch.float32, ["student", "teacher"], 4, 256),
]


@pytest.mark.parametrize("fn, shapes, dtype, kept, lanes, threads", KEPT,
                         ids=[f"{c[0].__name__}-{'x'.join(map(str, c[1][0]))}-{str(c[2])[6:]}" for c in KEPT])
def test_every_pass_reads_the_row_from_registers(fn, shapes, dtype, kept, lanes, threads):
    """Each global read of a kept input is one whole vector into the thread's copy, each of the thread's
    vectors read once; the passes read the copy, and nvcc keeps it in registers (no stack frame)."""
    k = compile_sm90(fn, *shapes, dtype=dtype)
    kernel = row_kernel(k)
    assert kernel.launch.endswith(f"block ({threads}, 1)"), kernel.launch
    body = kernel_body(k, kernel)
    width = shapes[0][-1] * (shapes[0][-2] if fn is instance_norm else 1)
    for name in kept:
        reads = global_reads(body, name)
        vector = re.compile(rf"^  \*\((\w+)\*\)\({name}_local_ptr \+ \d+\) = \*\(\1\*\)\({name}_ptr ")
        assert all(vector.match(line) for line in reads), reads
        assert len(reads) == width // (threads * lanes)   # a thread's vectors, each read once
        assert re.search(rf"\b{name}_local_ptr\[{width // threads}\];", body)
    assert k.stages["schedule"].count(THREAD_AXIS) == len(kept)
    if NVCC:
        assert "0 bytes stack frame" in ptxas_stack(k.source)


@pytest.mark.parametrize("shape", [(1, 64, 10, 100), (1, 64, 17, 241), (1, 64, 29, 1733), (1, 256, 256, 256)],
                         ids=["ragged", "odd", "vocabulary", "too-wide"])
def test_rows_that_do_not_tile_or_fit_are_read_per_pass(shape):
    """A width that whole vectors of the row's threads don't tile (1000, 4097, 50257), or a row too
    wide for the threads' registers (65536 floats: 64 a thread of 1024), keeps no copy: every pass
    reads global memory, as before."""
    k = compile_sm90(instance_norm, shape)
    row_kernel(k)
    assert THREAD_AXIS not in k.stages["schedule"]
    if NVCC:
        ptxas_stack(k.source)


def test_kept_threads_fit_the_register_budget():
    """The threads per row grow (to 1024) until a thread's share fits KEPT_BYTES, and only whole tiles."""
    class Buffer:
        def __init__(self, dtype):
            self.ty = type("T", (), {"dtype": dtype})()
    floats = [Buffer("float32")]
    assert kept_rows.kept_threads(floats, 4096, 4, 256) == 256          # 16 floats a thread
    assert kept_rows.kept_threads(floats, 32768, 4, 256) == 1024        # 32 floats a thread
    assert kept_rows.kept_threads(floats, 65536, 4, 256) is None        # 64: too many
    assert kept_rows.kept_threads(floats * 2, 8192, 4, 256) == 512      # two inputs: 16 + 16
    assert kept_rows.kept_threads([Buffer("float16")], 8192, 8, 256) == 256
    assert kept_rows.kept_threads(floats, 1000, 4, 64) is None          # 256 does not divide 1000
    assert kept_rows.kept_threads(floats, 2, 2, 1) == 1                 # one thread a row: its whole row
    assert kept_rows.kept_threads(floats, 48, 4, 1) == 2                # 192 bytes: two threads


# -- against torch on the CPU (the same programs; CPUReduction schedules them there) --------------

def with_specials(x):
    """x with a NaN, a +inf, a row of -inf and a row of large values (a vector is left as it is)."""
    if x.dim() < 2:
        return x
    x = x.clone()
    flat = x.view(-1, x.shape[-1]) if x.dim() == 2 else x.view(x.shape[0] * x.shape[1], -1)
    if flat.shape[0] >= 4:
        flat[0, flat.shape[1] // 3] = float("nan")
        flat[1, -1] = float("inf")
        flat[2] = -float("inf")
        flat[3] = flat[3] * 30.0
    return x


CPU_CASES = [(layer_norm, [(7, 64)], torch.float32), (layer_norm, [(9, 1000)], torch.float16),
             (layer_norm, [(5, 96)], torch.bfloat16), (layer_norm, [(0, 64)], torch.float32),
             (instance_norm, [(2, 3, 5, 7)], torch.float32), (kl_rows, [(6, 33), (6, 33)], torch.float32),
             (centred, [(4, 40)], torch.float16)]


@pytest.mark.parametrize("fn, shapes, dtype", CPU_CASES,
                         ids=[f"{c[0].__name__}-{'x'.join(map(str, c[1][0]))}-{str(c[2])[6:]}" for c in CPU_CASES])
def test_cpu_programs_agree_with_torch(fn, shapes, dtype):
    args = [with_specials(torch.randn(s)).to(dtype) for s in shapes]
    got, want = bt.jit(target="cpu")(fn)(*args), fn(*(a.float() for a in args))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(g.float(), w, rtol=tol, atol=tol, equal_nan=True)


# -- marked gpu: against torch on the GPU ---------------------------------------------------------

GPU_CASES = [(fn, shapes, dtype) for fn, shapes, dtype, *_ in KEPT] + [
    (group_norm, [(16, 32, 32, 128), (32,), (32,)], torch.float32),
    (group_norm, [(2, 8, 5, 3), (8,), (8,)], torch.float16),
    (layer_norm, [(64, 1000)], torch.float32), (layer_norm, [(0, 4096)], torch.float32),
    (layer_norm, [(3, 8192)], torch.float16), (instance_norm, [(2, 8, 64, 64)], torch.bfloat16)]


@pytest.mark.gpu
@pytest.mark.parametrize("fn, shapes, dtype", GPU_CASES,
                         ids=[f"{c[0].__name__}-{'x'.join(map(str, c[1][0]))}-{str(c[2])[6:]}" for c in GPU_CASES])
def test_gpu_programs_agree_with_torch(fn, shapes, dtype):
    args = [with_specials(torch.randn(s, device="cuda")).to(dtype) for s in shapes]
    got, want = bt.jit(target="gpu")(fn)(*args), fn(*(a.float() for a in args))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(g.float(), w, rtol=tol, atol=tol, equal_nan=True)


# -- a per-row result of the kernel that the row's output reads (int8 quantisation's scale) ------

@T.prim_func(s_tir=True)
def quantise(x: T.Buffer((T.int64(512), T.int64(4096)), "float32"),
             scale: T.Buffer((T.int64(512), T.int64(1)), "float32"),
             q: T.Buffer((T.int64(512), T.int64(4096)), "float32")):
    T.func_attr({"tirx.noalias": True})
    peak = T.sblock_alloc_buffer((T.int64(512), T.int64(1)), "float32")
    for i, j, k in T.grid(T.int64(512), T.int64(1), T.int64(4096)):
        with T.sblock("peak"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                peak[vi, vj] = T.min_value("float32")
            peak[vi, vj] = T.max(peak[vi, vj], T.fabs(x[vi, vk]))
    for i, j in T.grid(T.int64(512), T.int64(1)):   # the per-row result's kept axis: a loop of one
        with T.sblock("scale"):
            vi, vj = T.axis.remap("SS", [i, j])
            scale[vi, vj] = peak[vi, T.int64(0)] / T.float32(127)
    for i, j in T.grid(T.int64(512), T.int64(4096)):
        with T.sblock("q"):
            vi, vj = T.axis.remap("SS", [i, j])
            q[vi, vj] = T.nearbyint(x[vi, vj] / scale[vi, T.int64(0)])


def test_a_per_row_result_and_the_row_it_scales_are_one_kernel():
    """The scale (a result, one per row, written by a block over a loop of one) and the quantised row
    that reads it: InnerReduction reads x once into registers for the max and the division."""
    target = tvm.target.Target(SM90)
    with target:
        mod = dl.ApplyDefaultSchedule(*schedules.gpu_rules("dlight"))(tvm.IRModule({"main": quantise}))
    assert str(mod["main"].attrs[schedules.RULE_ATTR]) == "InnerReduction"
    assert THREAD_AXIS in mod.script()
    if NVCC:
        source = tvm.compile(schedules.own_thread_slices(mod), target=target).mod.imports[0].inspect_source()
        assert "0 bytes stack frame" in ptxas_stack(source)


# -- one parameter per tensor (passes/operands.py): group norm's repeated view of x ----------------

def test_group_norm_reads_its_one_input_once():
    """The reshape of x that the mean, the variance and the output read is one parameter of the row
    kernel (not three), kept in registers: rows of 32768 over 1024 threads."""
    k = compile_sm90(group_norm, (16, 32, 32, 128), (32,), (32,))
    kernel = row_kernel(k)
    assert kernel.launch.endswith("block (1024, 1)"), kernel.launch
    body = kernel_body(k, kernel)
    loaded = re.findall(r"\*\(float4\*\)\((\w+)_ptr \+", body)
    (param,) = {m for m in loaded if not m.startswith("T_") and "_local" not in m}
    assert len(global_reads(body, param)) == 32768 // (1024 * 4)
    if NVCC:
        assert "0 bytes stack frame" in ptxas_stack(k.source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cpu_group_norm_agrees_with_torch(dtype):
    x = with_specials(torch.randn(2, 8, 5, 3)).to(dtype)
    weight, bias = torch.randn(8).to(dtype), torch.randn(8).to(dtype)
    got = bt.jit(target="cpu")(group_norm)(x, weight, bias)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), group_norm(x.float(), weight.float(), bias.float()), rtol=tol, atol=tol,
                               equal_nan=True)


def int8_quantise(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    q = torch.clamp(torch.round(x / scale), -128, 127).to(torch.int8)
    return q, scale


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8192, 4096), (64, 1000), (0, 4096), (3, 7)])
def test_gpu_quantisation_agrees_with_torch(shape):
    """The scale and the rounded rows (one step apart at most where x / scale rounds at .5 either way)."""
    x = torch.randn(shape, device="cuda")   # no row of zeros (a scale of 0: x / 0)
    q, scale = bt.jit(target="gpu")(int8_quantise)(x)
    want_q, want_scale = int8_quantise(x)
    torch.testing.assert_close(scale, want_scale)
    assert q.shape == want_q.shape and q.dtype == torch.int8
    assert not q.numel() or (q.int() - want_q.int()).abs().max().item() <= 1


# -- a thread a row: narrow rows kept whole in one thread's registers --------------------------------

def masked_log_softmax(x, mask):
    """Perf fuzzer p170: a masked log-softmax over rows of 16, the mask broadcast over an inner axis."""
    return F.log_softmax(torch.where(mask, -1e4, x), dim=-1)


@pytest.mark.parametrize("shape, dtype", [((32000, 8, 4, 16), torch.float32), ((20000, 2, 4, 32), torch.float16),
                                          ((140000, 1, 1, 8), torch.float32)])
def test_a_row_of_one_thread_is_read_once(shape, dtype):
    """Rows that one thread reduces alone (4 vectors or fewer, rows enough to fill the GPU) are read
    once into its registers, not once per pass (the max, the sum of exps, the output): one vector
    load per vector of the row."""
    mask_shape = shape[:2] + (1,) + shape[3:]
    k = bt.jit(target=SM90)(masked_log_softmax).compile(torch.empty(shape, dtype=dtype, device="meta"),
                                                        torch.empty(mask_shape, dtype=torch.bool, device="meta"))
    kernel = row_kernel(k)
    assert re.fullmatch(r"grid \d+ x block \d+", kernel.launch), kernel.launch  # a thread a row
    body = kernel_body(k, kernel)
    lanes = 16 // dtype.itemsize
    vector = "float4" if dtype == torch.float32 else "uint4"
    reads = global_reads(body, "x")
    assert reads and all(re.search(rf"\*\({vector}\*\)\(x_ptr \+", line) for line in reads), reads
    assert len(reads) == max(shape[-1] // lanes, 1), reads
    if NVCC:
        assert "0 bytes stack frame" in ptxas_stack(k.source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cpu_masked_log_softmax_agrees_with_torch(dtype):
    x = with_specials(torch.randn(6, 2, 4, 16)).to(dtype)
    mask = torch.rand(6, 2, 1, 16) < 0.3
    got = bt.jit(target="cpu")(masked_log_softmax)(x, mask)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), masked_log_softmax(x.float(), mask), rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dtype", [((32000, 8, 4, 16), torch.float32), ((20000, 2, 4, 32), torch.float16),
                                          ((0, 8, 4, 16), torch.float32), ((140000, 1, 1, 8), torch.bfloat16)])
def test_gpu_masked_log_softmax_agrees_with_torch(shape, dtype):
    x = torch.randn(shape, device="cuda")
    x = (with_specials(x) if x.numel() else x).to(dtype)
    mask = torch.rand(shape[:2] + (1,) + shape[3:], device="cuda") < 0.3
    got = bt.jit(target="gpu")(masked_log_softmax)(x, mask)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), masked_log_softmax(x.float(), mask), rtol=tol, atol=tol, equal_nan=True)
