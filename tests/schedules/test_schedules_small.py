"""SmallReduction: reductions over a few elements of outer or middle axes, a thread an element. The
CUDA is compiled by nvcc; the schedule itself runs on the CPU with its thread loops made serial (its
threads never talk to each other), compared with torch."""
import shutil

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from hypothesis import example, given, settings, strategies as st
from tvm import tirx

import babytriton as bt

from test_schedules import SM90, nvcc_ptx


def softmax_numerator(x):
    return torch.exp(x - x.amax(1, keepdim=True))


def normalised_over_channels(x, y):
    return x * torch.rsqrt((x * x).mean(0, keepdim=True) + 1e-5) + y


def channel_sum(x):
    return x.sum(1)


def channel_argmax(x):
    return x.argmax(1)


FUNCTIONS = {f.__name__: f for f in (softmax_numerator, normalised_over_channels, channel_sum, channel_argmax)}


def _serial(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def serial(loop):
        if loop.kind != tirx.ForKind.THREAD_BINDING:
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body)
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, serial)))


def _inputs(fn, shape, dtype):
    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=gen) * 4).to(dtype)
    x.view(-1)[0] = float("nan")
    return (x, torch.randn(shape, generator=gen).to(dtype)) if fn is normalised_over_channels else (x,)


def _run_on_cpu(k, args, out_like):
    """The one kernel of `k`, scheduled for the GPU, run on the CPU with its thread loops serial."""
    scheduled = tvm.script.from_source(k.stages["schedule"])
    [func] = [f for _, f in scheduled.functions_items() if isinstance(f, tirx.PrimFunc)]
    built = tvm.compile(tvm.IRModule({"main": _serial(func).with_attr("global_symbol", "main")}), target="llvm")
    out = tvm.runtime.tensor(np.zeros(out_like.shape, dtype=str(out_like.dtype).replace("torch.", "")))
    built(*[tvm.runtime.tensor(a.numpy()) for a in args], out)
    return torch.from_numpy(out.numpy())


@settings(max_examples=8, deadline=None)
@given(name=st.sampled_from(sorted(FUNCTIONS)), a=st.integers(1, 40), r=st.integers(2, 8), c=st.integers(2, 70),
       dtype=st.sampled_from([torch.float32, torch.float16]))
def test_small_reductions_match_torch(name, a, r, c, dtype):
    fn = FUNCTIONS[name]
    shape = (r, a, c) if fn is normalised_over_channels else (a, r, c)
    args = _inputs(fn, shape, dtype)
    k = bt.jit(target=SM90)(fn).compile(*[t.to("meta") for t in args])
    assert [kk.rule for kk in k.fusion] == ["SmallReduction"], str(k.fusion)
    want = fn(*args)
    got = _run_on_cpu(k, args, want)
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(got.to(want.dtype), want, equal_nan=True, **tol)


@pytest.mark.parametrize("name, shape", [("softmax_numerator", (97271, 2, 100)), ("channel_argmax", (805, 3, 64))])
def test_small_reductions_are_one_launch_without_cross_thread_steps(name, shape):
    k = bt.jit(target=SM90)(FUNCTIONS[name]).compile(torch.empty(shape, device="meta"))
    [kernel] = k.fusion
    assert kernel.rule == "SmallReduction" and len(kernel.cuda_kernels) == 1, str(k.fusion)
    assert "red_buf" not in k.source and "__shfl" not in k.source
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


def test_reductions_of_more_elements_or_along_rows_are_not_small():
    assert [kk.rule for kk in bt.jit(target=SM90)(channel_sum).compile(torch.empty(64, 9, 128, device="meta")).fusion] \
        != ["SmallReduction"]
    rows = bt.jit(target=SM90)(softmax_numerator).compile(torch.empty(4096, 64, 1, device="meta").transpose(1, 2))
    assert [kk.rule for kk in rows.fusion] != ["SmallReduction"]   # a contiguous row of 64


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("shape", [(97271, 2, 100), (5, 3, 7), (1, 8, 1), (33, 5, 129)])
def test_gpu_small_reductions_match_torch(name, shape):
    fn = FUNCTIONS[name]
    args = [t.cuda() for t in _inputs(fn, shape if fn is not normalised_over_channels else shape[::-1], torch.float32)]
    torch.testing.assert_close(bt.jit(target="gpu")(fn)(*args), fn(*args), equal_nan=True, rtol=1e-5, atol=1e-5)


# -- several small reductions in one kernel: a softmax over a middle axis (p116) -------------------
def middle_softmax(x):
    e = torch.exp(x - x.max(dim=1, keepdim=True).values)
    return e / e.sum(1, keepdim=True)


def library_middle_softmax(x):
    return torch.softmax(x, dim=1)


def middle_log_softmax_and_norm(x):
    return torch.log_softmax(x, dim=1) * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-5)


SEVERAL = {f.__name__: f for f in (middle_softmax, library_middle_softmax, middle_log_softmax_and_norm)}


def _with_specials(shape, dtype, seed):
    """Random values with a NaN, +inf and -inf, and a column of -inf (its softmax: NaN, as in torch)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3
    flat = x.view(-1)
    for i, v in zip((0, flat.numel() // 2, flat.numel() - 1), ("nan", "inf", "-inf")):
        flat[i] = float(v)
    x[-1, :, 0] = float("-inf")
    return x.to(dtype)


@settings(max_examples=4, deadline=None)
@example(name="middle_softmax", a=5, r=2, c=33, dtype=torch.float32, transposed=False)
@example(name="library_middle_softmax", a=7, r=3, c=64, dtype=torch.float16, transposed=False)
@given(name=st.sampled_from(sorted(SEVERAL)), a=st.integers(1, 30), r=st.integers(2, 8), c=st.integers(2, 70),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), transposed=st.booleans())
def test_several_small_reductions_are_one_kernel_and_match_torch(name, a, r, c, dtype, transposed):
    """Every reduction over a middle axis of at most 8 in one kernel (SmallReduction on sm_90, one
    launch, reading x once; a non-contiguous x is first copied), its results torch's on the CPU
    (CPUOuterReduction)."""
    fn = SEVERAL[name]
    x = _with_specials((a, r, c), dtype, a * r * c)
    if transposed:
        x = x.transpose(0, 2).contiguous().transpose(0, 2)
    gpu = bt.jit(target=SM90)(fn).compile(x.to("meta"))
    reducing = [kk for kk in gpu.fusion if kk.name.startswith("fused_rows")]
    assert [kk.rule for kk in reducing] == ["SmallReduction"] and len(reducing[0].cuda_kernels) == 1, gpu.fusion
    cpu = bt.jit(target="cpu")(fn)
    assert len([kk for kk in cpu.compile(x).fusion if kk.name.startswith("fused_rows")]) == 1, cpu.compile(x).fusion
    want = fn(x.float()).to(dtype) if dtype != torch.float32 else fn(x)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(cpu(x), want, equal_nan=True, **tol)
    if len(gpu.fusion) == 1 and dtype != torch.bfloat16:  # the sm_90 kernel itself (numpy has no bfloat16)
        torch.testing.assert_close(_run_on_cpu(gpu, (x,), want).to(dtype), want, equal_nan=True, **tol)


def test_softmax_over_a_middle_axis_reads_x_once_on_sm90():
    """p116's softmax over an axis of 2: one kernel, whose only global loads are x's and only store
    the result (no `exp(x - max)` buffer written and read back); an axis of 9 stays a kernel per
    reduction (OuterReduction's)."""
    k = bt.jit(target=SM90)(middle_softmax).compile(torch.empty(97271, 2, 100, device="meta"))
    [kernel] = k.fusion
    assert kernel.rule == "SmallReduction" and len(kernel.cuda_kernels) == 1, k.fusion
    [signature] = [line for line in k.source.splitlines() if "__global__" in line and "{" in line]
    assert signature.count("_ptr") == 2, signature  # the result and x
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)
    wide = bt.jit(target=SM90)(middle_softmax).compile(torch.empty(4096, 9, 100, device="meta"))
    assert len(wide.fusion) == 2, wide.fusion
