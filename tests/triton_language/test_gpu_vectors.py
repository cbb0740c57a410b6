"""A thread's contiguous elements of a block nest read and written as 16-byte vectors on a GPU
(compiler/gpu.py `width`, `vector`): the CUDA made for sm_90 without a GPU (vector loads where the
run-time alignment checks hold, nvcc's registers), the shape rule, and on a GPU the results against
torch and the interpreter at ragged sizes, misaligned rows and pointers."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

import pytest
import torch
import tvm
from hypothesis import given, settings, strategies as st

import babytriton.triton as triton
import babytriton.triton.language as tl
from babytriton.triton.compiler import gpu

import kernels

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@triton.jit
def row_affine(x_ptr, w_ptr, y_ptr, stride, N, BLOCK: tl.constexpr):
    """A masked block loop over a row, as layer norm's passes: y = x * w + mean(x)."""
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N)
        tl.store(y_ptr + row * stride + cols, (x * w + mean).to(y_ptr.dtype.element_ty), mask=cols < N)


def row_affine_ref(x, w):
    return (x.float() * w.float() + x.float().mean(dim=1, keepdim=True)).to(x.dtype)


def build(x, w, block, num_warps):
    """row_affine compiled for sm_90 (no GPU needed)."""
    return row_affine.warmup(x, w, torch.empty_like(x), x.stride(0), x.shape[1], BLOCK=block, num_warps=num_warps,
                             grid=(x.shape[0],), target=SM90)


def ptxas(source: str) -> str:
    """nvcc's register and spill report for `source` built for sm_90."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cu")
        with open(path, "w") as f:
            f.write(source)
        done = subprocess.run(["nvcc", "-arch=sm_90", "-w", "--resource-usage", "-cubin", "-o", path + ".cubin", path],
                              capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


def registers(report: str) -> int:
    assert "0 bytes spill stores" in report
    return int(re.search(r"Used (\d+) registers", report).group(1))


@pytest.mark.parametrize("dtype, vector", [(torch.float16, "uint4"), (torch.float32, "float4")])
def test_rows_are_read_as_16_byte_vectors_where_aligned(dtype, vector):
    x, w = torch.randn(4, 4096).to(dtype), torch.randn(4096).to(dtype)
    source = build(x, w, 4096, 8).stages["source"]
    assert re.search(rf"\*\({vector}\*\)\(x_ptr_ptr \+", source), "the row's loads are 16-byte vectors"
    assert "reinterpret_cast<uint64_t>(x_ptr_ptr) & (uint64_t)15ULL" in source   # the pointer checked at run time
    assert "x_ptr_ptr[" in source, "element by element where they fail"
    if shutil.which("nvcc"):
        assert registers(ptxas(source)) <= 64


@pytest.mark.parametrize("dtype, lanes", [(torch.float32, 4), (torch.float16, 8)])
def test_a_threads_chunk_is_16_bytes_of_the_narrowest_tensor(dtype, lanes):
    """Neighbouring threads read neighbouring 16-byte vectors: a float32 row of 4096 over 256 threads is
    4 rounds of 4 elements (chunks of 8 put a warp's float4 loads 32 bytes apart: the tutorial softmax
    went from 0.94x to 0.73x of Triton's time on an H200), a float16 row 2 rounds of 8."""
    x, w = torch.randn(4, 4096).to(dtype), torch.randn(4096).to(dtype)
    source = build(x, w, 4096, 8).stages["source"]
    assert f"(((int)threadIdx.x) * {lanes}) + {256 * lanes})" in source   # the second round: the next 256 chunks
    assert f"(((int)threadIdx.x) * {2 * lanes})" not in source


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_layer_norm_at_4096_reads_each_row_pass_in_two_vectors_per_thread():
    """The tutorial at its benchmark size: 8 warps, a 4096-element block, each thread's 16 float16
    elements two 16-byte loads a pass (the scalar version made 16 two-byte loads and used 70 registers)."""
    x, wb = torch.randn(2, 4096).half(), torch.randn(4096).half()
    k = kernels._layer_norm_fwd_fused.warmup(x, torch.empty_like(x), wb, wb, torch.empty(2), torch.empty(2), 4096,
                                             4096, 1e-5, BLOCK_SIZE=4096, num_warps=8, grid=(2,), target=SM90)
    source = k.stages["source"]
    assert len(re.findall(r"= \*\(uint4\*\)\(X_ptr \+", source)) == 6   # 3 passes x 2 vectors
    assert registers(ptxas(source)) <= 64


def test_a_gathered_block_stays_lane_by_lane():
    """A column (stride N between lanes) is no vector: TVM's 8-lane gathers have no CUDA type."""
    @triton.jit
    def column(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i * N) * 2)
    k = column.warmup(torch.randn(4096), torch.randn(1024), 4, BLOCK=1024, grid=(1,), target=SM90)
    source = k.stages["source"]
    assert "*(float4*)(x_ptr_ptr" not in source and "x_ptr_ptr[" in source
    assert "*(float4*)(y_ptr_ptr" in source   # the store, contiguous, still one


@given(extents=st.lists(st.sampled_from([1, 2, 3, 4, 8, 16, 24, 64, 128, 1024]), min_size=1, max_size=3),
       warps=st.sampled_from([1, 2, 4, 8, 16]))
@settings(max_examples=60, deadline=None)
def test_width_divides_the_last_axis_and_leaves_every_thread_a_vector(extents, warps):
    threads = warps * 32
    v = gpu.width(extents, threads)
    total = 1
    for e in extents:
        total *= e
    assert v in (1, 2, 4, 8) and extents[-1] % v == 0
    assert v == 1 or total >= threads * v
    assert v == gpu.VECTOR or extents[-1] % (2 * v) or total < threads * 2 * v   # as wide as allowed


# --- on a GPU: results against torch and the interpreter ---------------------------------------------

@GPU
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n, block", [(4096, 4096), (4096, 1024), (1000, 1024), (4100, 1024), (37, 64)])
def test_row_loop_matches_torch(dtype, n, block):
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(5, n, generator=gen).to(dtype).cuda()
    w = torch.randn(n, generator=gen).to(dtype).cuda()
    y = torch.empty_like(x)
    row_affine[(5,)](x, w, y, x.stride(0), n, BLOCK=block, num_warps=8)
    torch.testing.assert_close(y, row_affine_ref(x, w), atol=2e-2, rtol=2e-2)


@GPU
@pytest.mark.parametrize("shift", [1, 3, 8])
def test_misaligned_rows_and_pointers_fall_back_lane_by_lane(shift):
    """Rows starting off a 16-byte boundary (a view at an odd column): correct, not faulting."""
    gen = torch.Generator().manual_seed(shift)
    base = torch.randn(6, 4096 + 16, generator=gen).half().cuda()
    x = base[:, shift:shift + 4096]
    w = torch.randn(4096 + shift, generator=gen).half().cuda()[shift:]
    y = torch.empty_like(base)[:, shift:shift + 4096]
    row_affine[(6,)](x, w, y, x.stride(0), 4096, BLOCK=4096, num_warps=8)
    torch.testing.assert_close(y, row_affine_ref(x, w), atol=2e-2, rtol=2e-2)


@GPU
@given(n=st.integers(1, 5000))
@settings(max_examples=20, deadline=None)
def test_layer_norm_matches_torch_and_the_interpreter(n):
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(3, n, generator=gen).half()
    w, b = torch.randn(n, generator=gen).half(), torch.randn(n, generator=gen).half()
    y, mean, rstd = kernels.layer_norm(x.cuda(), w.cuda(), b.cuda())
    y_ref, mean_ref, rstd_ref = kernels.layer_norm_ref(x, w, b)
    torch.testing.assert_close(y.cpu(), y_ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(mean.cpu(), mean_ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(rstd.cpu(), rstd_ref, atol=1e-3, rtol=1e-3)
    os.environ["BABYTRITON_INTERPRET"] = "1"
    try:
        y_int, _, _ = kernels.layer_norm(x, w, b)
    finally:
        del os.environ["BABYTRITON_INTERPRET"]
    torch.testing.assert_close(y.cpu(), y_int, atol=2e-2, rtol=2e-2)
