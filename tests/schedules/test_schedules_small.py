"""SmallReduction: reductions over a few elements of outer or middle axes, a thread an element. The
CUDA is compiled by nvcc; the schedule itself runs on the CPU with its thread loops made serial (its
threads never talk to each other), compared with torch."""
import re
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


# -- a thread a column: the short axes looped in the thread, 16-byte vectors of the kept one ------------
def rms_with_residual(x, res):
    """p0's norm over a middle axis of 2 with a residual: rsqrt has no vector form in TVM (staged)."""
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-12) + res


def transposed_norm(x, y):
    """p185's form: the short axis innermost in the output, read across a permuted input."""
    h = x.permute(0, 2, 1) * y
    return h / torch.sqrt((h * h).sum(-1, keepdim=True)).clamp_min(1e-6)


def _ptx_counts(source: str) -> dict:
    """Global loads and stores in the PTX of a one-kernel source: all, and of 16-byte vectors."""
    ptx = nvcc_ptx(source).decode()
    return {k: len(re.findall(p, ptx)) for k, p in (("ld", r"ld\.global"), ("ld.v4", r"ld\.global[.\w]*\.v4"),
                                                     ("st", r"st\.global"), ("st.v4", r"st\.global[.\w]*\.v4"))}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("fn, shapes, grid, moves", [
    (middle_softmax, [(97271, 2, 100)], 9500, {"ld": 2, "ld.v4": 2, "st": 2, "st.v4": 2}),  # p116
    (rms_with_residual, [(11413, 2, 1000)] * 2, 11146, {"ld": 4, "ld.v4": 4, "st": 2, "st.v4": 2}),  # p0
    # p185's form: a thread a column of 4 consecutive outputs, stored as one vector, and y (laid out
    # like them) loaded as one; x, permuted, 4 loads, each coalesced across the threads
    (transposed_norm, [(8205, 4, 1024), (8205, 1024, 4)], 32820, {"ld": 5, "ld.v4": 1, "st": 1, "st.v4": 1}),
])
def test_a_thread_loads_its_column_once_in_whole_vectors(fn, shapes, grid, moves):
    """Each thread owns 4 consecutive columns of the kept axes (97271 x 100 / 4 threads, 256 a
    block), loads each input element once as float4 (2 rows of 2 inputs: 4 loads), computes the
    reductions once and stores every output of its columns as float4: no scalar access, no
    re-read (the old schedule: a thread an element, 5 scalar loads each for p116)."""
    k = bt.jit(target=SM90)(fn).compile(*[torch.empty(s, device="meta") for s in shapes])
    [kernel] = k.fusion
    assert kernel.rule == "SmallReduction" and kernel.launch == f"grid {grid} x block 256", k.fusion
    assert _ptx_counts(k.source) == moves


def outer_softmax(x):
    return torch.softmax(x, dim=0)


def middle_argmin(x):
    return x.argmin(1)


def middle_log_softmax_4d(x):
    return torch.log_softmax(x, dim=1)


ANYWHERE = {f.__name__: f for f in (rms_with_residual, transposed_norm, outer_softmax, middle_argmin,
                                      middle_log_softmax_4d, middle_softmax)}


def _anywhere_args(fn, a, r, c, dtype, seed):
    """The inputs of `fn` with the short axis (r) where it reduces, NaN and infinities included."""
    shape = {outer_softmax: (r, a, c), middle_log_softmax_4d: (a, r, 3, c), transposed_norm: (a, r, c)}.get(fn, (a, r, c))
    x = _with_specials((shape[0], shape[1], int(np.prod(shape[2:]))), dtype, seed).reshape(shape)
    if fn is rms_with_residual:
        return x, torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    if fn is transposed_norm:
        return x, torch.randn((a, c, r), generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    return (x,)


@settings(max_examples=10, deadline=None)
@example(name="transposed_norm", a=3, r=4, c=20, dtype=torch.float32)
@example(name="rms_with_residual", a=5, r=2, c=12, dtype=torch.float16)
@example(name="middle_argmin", a=7, r=3, c=64, dtype=torch.float32)
@given(name=st.sampled_from(sorted(ANYWHERE)), a=st.integers(1, 30), r=st.integers(2, 8), c=st.integers(2, 70),
       dtype=st.sampled_from([torch.float32, torch.float16]))
def test_columns_match_torch_for_any_short_axis(name, a, r, c, dtype):
    """The short axis outermost, in the middle, innermost in the output (read across a permuted
    input), in rank 4; ragged splits of the threads, widths no vector divides; NaN and infinities:
    the sm_90 kernel, run on the CPU with its thread loops serial, gives torch's results."""
    fn = ANYWHERE[name]
    args = _anywhere_args(fn, a, r, c, dtype, a * r * c)
    k = bt.jit(target=SM90)(fn).compile(*[t.to("meta") for t in args])
    assert [kk.rule for kk in k.fusion] == ["SmallReduction"], k.fusion
    want = fn(*[t.float() for t in args]).to(dtype) if fn is not middle_argmin else fn(*args)
    got = _run_on_cpu(k, args, want)
    if fn is middle_argmin:
        assert torch.equal(got, want)
    else:
        tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        torch.testing.assert_close(got.to(dtype), want, equal_nan=True, **tol)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("fn, shapes", [
    (rms_with_residual, [(13, 4, 2048)] * 2), (middle_softmax, [(721, 8, 96)]),
    (transposed_norm, [(8205, 4, 1024), (8205, 1024, 4)]), (middle_argmin, [(282, 8, 1536)])])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_columns_build_for_sm90(fn, shapes, dtype):
    """bfloat16 and float16 columns (numpy has no bfloat16 to run them on): one SmallReduction
    kernel, which nvcc accepts."""
    k = bt.jit(target=SM90)(fn).compile(*[torch.empty(s, dtype=dtype, device="meta") for s in shapes])
    assert [kk.rule for kk in k.fusion] == ["SmallReduction"], k.fusion
    assert b".entry" in nvcc_ptx(k.source)


def symbolic_middle_softmax(x: bt.Tensor(("n", 3, "m"), "float32")):
    return torch.softmax(x, dim=1)


def test_symbolic_sizes_are_columns_of_one_lane():
    """A symbolic kept width: one column a thread (no vector divides it for sure), still each
    reduction computed once per column; the result torch's for several sizes."""
    k = bt.jit(target=SM90)(symbolic_middle_softmax).compile()
    assert [kk.rule for kk in k.fusion] == ["SmallReduction"], k.fusion
    for shape in [(1, 3, 1), (5, 3, 33), (2, 3, 256)]:
        x = _with_specials(shape, torch.float32, sum(shape))
        want = torch.softmax(x, dim=1)
        torch.testing.assert_close(_run_on_cpu(k, (x,), want), want, equal_nan=True)
