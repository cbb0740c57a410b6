"""A row's reduced value read once into a register (babytriton/lowering/reduced_values.py): after an
all-reduce over several warps TVM leaves the result in volatile shared memory; each kernel now loads
it once, and nvcc merges the math on it (a quantisation's x / scale, which TVM's NaN-aware clamp
repeats). Here: the CUDA and PTX built for sm_90 (no GPU needed), and, marked gpu, torch's results."""
import re
import shutil
import subprocess

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")
VOLATILE_READ = re.compile(r"=[^=\n]*\(\(volatile \w+\*\)red_result\w*\)\[0\]")


def int8_quantise(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    q = torch.clamp(torch.round(x / scale), -128, 127).to(torch.int8)
    return q, scale


def softmax(x):
    h = x.float()
    e = torch.exp(h - h.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def rms_norm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def compile_sm90(fn, shape, dtype):
    return bt.jit(target=SM90)(fn).compile(torch.empty(shape, dtype=dtype, device="meta"))


def volatile_reads(source: str) -> int:
    """Reads (not writes) of an all-reduce's volatile result in the CUDA source."""
    return len(VOLATILE_READ.findall(source))


def ptx(source: str) -> str:
    out = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-x", "cu", "-", "-o", "-"], input=source,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def reductions_over_warps(source: str) -> int:
    """The all-reduces that went through shared memory (their volatile result)."""
    return len(re.findall(r"\(\(volatile \w+\*\)red_result\w*\)\[0\] = red_buf", source))


@pytest.mark.parametrize("fn, shape, dtype", [
    (int8_quantise, (512, 4096), torch.float32), (int8_quantise, (64, 1000), torch.float32),
    (int8_quantise, (128, 2048), torch.float16), (softmax, (300, 4096), torch.bfloat16),
    (rms_norm, (96, 8192), torch.float32)])
def test_each_reduced_value_is_read_once(fn, shape, dtype):
    k = compile_sm90(fn, shape, dtype)
    over_warps = reductions_over_warps(k.source)
    assert over_warps >= 1, [kernel.launch for kernel in k.fusion]
    assert volatile_reads(k.source) == over_warps
    if NVCC:
        assert len(re.findall(r"ld\.volatile\.shared", ptx(k.source))) == over_warps


@pytest.mark.skipif(NVCC is None, reason="nvcc")
def test_quantise_divides_once_per_element():
    """clamp(round(x / scale)): x / scale once per element (plus the scale's own division), where it
    had been three times, each after a volatile load of the scale."""
    k = compile_sm90(int8_quantise, (512, 4096), torch.float32)
    (kernel,) = [kernel for kernel in k.fusion if kernel.rule == "InnerReduction"]
    threads = int(re.search(r"block \((\d+)", kernel.launch).group(1))
    per_thread = 4096 // threads
    assert len(re.findall(r"div\.rn\.f32", ptx(k.source))) <= per_thread + 1


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 300), width=st.sampled_from([257, 1000, 2048, 4096, 6144]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_generated_rows_read_their_reduced_values_once(rows, width, dtype):
    k = compile_sm90(int8_quantise, (rows, width), dtype)
    assert volatile_reads(k.source) == reductions_over_warps(k.source)


# -- marked gpu: against torch ----------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8192, 4096), (64, 1000), (0, 4096), (5, 50257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gpu_rows_agree_with_torch(shape, dtype):
    x = torch.randn(shape, device="cuda").to(dtype)
    if x.numel():
        x[0, 3] = float("nan")
        x[-1, 1] = float("inf")
    got = bt.jit(target="gpu")(softmax)(x)
    torch.testing.assert_close(got.float(), softmax(x).float(), rtol=2e-2, atol=2e-3, equal_nan=True)
    got = bt.jit(target="gpu")(rms_norm)(x)
    torch.testing.assert_close(got.float(), rms_norm(x.float()), rtol=2e-2, atol=2e-2, equal_nan=True)
    y = torch.randn(shape, device="cuda").to(dtype)
    q, scale = bt.jit(target="gpu")(int8_quantise)(y)
    want_q, want_scale = int8_quantise(y.float())
    torch.testing.assert_close(scale.float(), want_scale, rtol=1e-2, atol=1e-3)
    assert not q.numel() or (q.int() - want_q.int()).abs().max().item() <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cpu_rows_agree_with_torch(dtype):
    """The same programs on the CPU (no all-reduce there): NaN and inf rows included."""
    x = torch.randn(6, 1000).to(dtype)
    x[0, 3], x[2, 1] = float("nan"), float("inf")
    torch.testing.assert_close(bt.jit(target="cpu")(softmax)(x).float(), softmax(x).float(), rtol=2e-2, atol=2e-3,
                               equal_nan=True)
    q, scale = bt.jit(target="cpu")(int8_quantise)(x[3:].float())
    want_q, want_scale = int8_quantise(x[3:].float())
    torch.testing.assert_close(scale, want_scale)
    assert (q.int() - want_q.int()).abs().max().item() <= 1
