"""A reduction's element-wise prologue too costly to inline (InnerReduction `_recomputed`, inlining
`Costs`): over long rows each pass computes it again element by element in registers, a copy per
reader, where keeping it would give every thread a register array as wide as the row; and a costly
producer is not copied into many readers of one kernel (its copies together stay within the bound)."""
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir, te, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func

import babytriton as bt
from babytriton.schedules.inlining import GPU_CALL_DEPTH, inline

SM90 = {"kind": "cuda", "arch": "sm_90"}


def p73(x, y, y2):
    """The performance fuzzer's p73: a mish chain whose RMS over rows of 32000 scales it, transposed."""
    h = x.float()
    h = F.leaky_relu(h, 0.1)
    h = F.mish(h)
    h = torch.maximum(h, y)
    ms = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(ms + 1e-12)
    h = h.T * y2
    h = torch.rsqrt(h * h + 1.0)
    return h.to(torch.bfloat16)


def args(rows: int, width: int, device="cpu"):
    g = torch.Generator().manual_seed(rows * 7 + width)
    x = torch.randn(rows, width, generator=g).to(torch.bfloat16)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    return (x.to(device), torch.randn(width, generator=g).to(device),
            torch.randn(width, rows, generator=g).to(torch.bfloat16).to(device))


def ptxas(source: str) -> str:
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", os.devnull],
                         input=source, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


@pytest.mark.parametrize("width", [32000, 4096, 1000])
def test_a_long_rows_prologue_is_computed_in_each_pass_on_the_gpu(width):
    """p73 was Dlight's Reduction (its unrolled, fully inlined prologue: 116 s to build), then Fallback
    (14 threads summing 32000 elements each); it is InnerReduction's, and no thread keeps a row."""
    k = bt.jit(target=SM90, cache=False)(p73).compile(*(a.to("meta") for a in args(14, width)))
    rules = [kernel.rule for kernel in k.fusion]
    assert rules[0] == "InnerReduction" and "dlight.gpu.Fallback" not in rules, str(k.fusion)
    arrays = [int(n) for n in re.findall(r"\b\w+_local\w*\[(\d+)\];", k.source)]
    assert max(arrays, default=0) <= 64, arrays
    if shutil.which("nvcc"):
        report = ptxas(k.source)
        assert "0 bytes spill stores" in report and not re.search(r"[1-9]\d* bytes stack frame", report), report


@settings(max_examples=4, deadline=None)
@given(rows=st.sampled_from([1, 3, 14]), width=st.sampled_from([300, 2048, 5003]))
def test_p73_matches_torch_on_the_cpu(rows, width):
    got, want = bt.jit(cache=False)(p73)(*args(rows, width)), p73(*args(rows, width))
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows, width", [(14, 32000), (3, 4096), (5, 1000)])
def test_p73_matches_torch_on_the_gpu(rows, width):
    got, want = bt.jit(target="gpu")(p73)(*args(rows, width, "cuda")), p73(*args(rows, width, "cuda"))
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2, equal_nan=True)


def fan_out(readers: int, levels: int):
    """A producer (`levels` clamps of x, each naming its operand twice: a cost of about 4**levels) read
    by `readers` blocks."""
    def clamp(p):
        return te.compute((64,), lambda i: tirx.Select(p[i] < 0.0, tirx.const(0.0, "float32"), p[i]))

    def scaled(p, k):
        return te.compute((64,), lambda i: p[i] * float(k + 2))

    x = p = te.placeholder((64,), "float32", name="x")
    for _ in range(levels):
        p = clamp(p)
    return te.create_prim_func([x, *(scaled(p, k) for k in range(readers))])


@pytest.mark.parametrize("readers, levels, copied", [(2, 2, True), (9, 2, True), (2, 4, True), (9, 4, False)])
def test_a_costly_producer_is_not_copied_into_many_readers(readers, levels, copied):
    """Each copy fits the bound (4 levels cost about 1200), but 9 of them don't: p5's normalisation
    (cost 2900) copied into 9 blocks of one kernel took TVM's lowering 14 s; kept, it is computed once."""
    sch = s_tir.Schedule(fan_out(readers, levels))
    left = inline(sch, normalize_prim_func(sch), GPU_CALL_DEPTH)
    assert len(left) == readers + (0 if copied else 1), [sch.get(info.block_rv).name_hint for info in left]
