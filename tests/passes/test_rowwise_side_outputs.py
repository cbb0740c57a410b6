"""A row kernel writes every value it computes that is also needed outside it (issue 28): a per-row
value (a quantisation's scale, a row's max returned with its softmax) or a tile (the residual sum that
an RMSNorm reads), instead of a kernel of its own writing it for the row kernel to read back, as
Inductor stores such a buffer from the kernel that computes it. Each program: one kernel, scheduled by
a rule made for rows on the CPU (run, compared with torch: NaN and inf, empty rows, half dtypes over
long rows, symbolic sizes) and for sm_90 (CUDA compiled by nvcc, no GPU needed)."""
import math
import re
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.passes import rowwise

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")
GPU_ROWS = {"InnerReduction", "RowKernel"}
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=1e-2),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


# -- programs as users write them ------------------------------------------------------------------

def residual_rmsnorm(x, residual, weight):
    h = x + residual
    hf = h.float()
    out = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return out.to(x.dtype) * weight, h


def int8_quantise(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    q = torch.clamp(torch.round(x / scale), -128, 127).to(torch.int8)
    return q, scale


def softmax_and_max(x):
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True), m


def layernorm_with_statistics(x, w, b):
    mean = x.mean(-1, keepdim=True)
    d = x - mean
    rstd = torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-5)
    return d * rstd * w + b, mean, rstd


def max_and_logsumexp(x):
    m = x.amax(-1)
    return m, m + torch.log(torch.exp(x - m.unsqueeze(-1)).sum(-1))


def tanh_and_its_norm(x):
    g = torch.tanh(x) * 2.0
    return g, g * torch.rsqrt((g * g).mean(-1, keepdim=True) + 1e-6)


PROGRAMS = {
    "residual_rmsnorm": (residual_rmsnorm, "x r w"),
    "int8_quantise": (int8_quantise, "x"),
    "softmax_and_max": (softmax_and_max, "x"),
    "layernorm_with_statistics": (layernorm_with_statistics, "x w b"),
    "max_and_logsumexp": (max_and_logsumexp, "x"),
    "tanh_and_its_norm": (tanh_and_its_norm, "x"),
}
TOLERANCE = {"int8_quantise": dict(rtol=0, atol=1)}  # a division's last bit may round q either way


def inputs(name, lead, width, dtype=torch.float32, specials=True, seed=0):
    """Each argument of the program: rows (`lead` + (width,)) with a NaN, an inf and a -inf where
    there are rows enough, and vectors of the width (a weight, a bias)."""
    gen = torch.Generator().manual_seed(seed)
    args = []
    for kind in PROGRAMS[name][1].split():
        if kind in "wb":
            args.append((torch.rand(width, generator=gen) + 0.5).to(dtype))
            continue
        x = torch.randn(*lead, width, generator=gen) * 3
        rows = x.reshape(-1, width)
        if specials and kind == "x" and rows.shape[0] >= 4 and width >= 4:
            rows[0, width // 2], rows[1, width - 1], rows[2, 1] = math.nan, math.inf, -math.inf
        args.append(x.to(dtype))
    return args


def assert_like_torch(fn, args, got, tolerance):
    want = fn(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype == torch.int8:  # a NaN (inf / inf) quantises to whatever the cast makes of it: the rest
            keep = torch.isfinite(fn(*[a.float() if a.is_floating_point() else a for a in args])[1].expand(w.shape))
            g, w = g[keep].int(), w[keep].int()
        torch.testing.assert_close(g, w, equal_nan=True, **tolerance)


def row_kernels(fusion) -> list:
    return [k for k in fusion if k.name.startswith(rowwise.PREFIX)]


# -- one kernel writing every result ----------------------------------------------------------------

@pytest.mark.parametrize("name", PROGRAMS)
def test_one_cpu_row_kernel_writes_every_result(name):
    fn = PROGRAMS[name][0]
    args = inputs(name, (64,), 96)
    k = bt.jit(fn, target="cpu", cache=False).compile(*args)
    assert len(k.fusion) == 1 and k.fusion[0].rule == "CPUReduction", str(k.fusion)
    assert_like_torch(fn, args, k(*args), TOLERANCE.get(name, TOL[torch.float32]))


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("width", [4096, 1000])
def test_one_cuda_row_kernel_writes_every_result(name, width):
    fn = PROGRAMS[name][0]
    args = [a.to("meta") for a in inputs(name, (512,), width, torch.bfloat16, specials=False)]
    k = bt.jit(fn, target=SM90, cache=False).compile(*args)
    assert len(k.fusion) == 1 and k.fusion[0].rule in GPU_ROWS, str(k.fusion)
    if NVCC:
        from tvm.support import nvcc
        import tvm
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


def test_the_residual_sum_is_written_from_registers_not_read_back():
    """x and residual are read once into registers: the sum, its square's mean and the output are
    computed from there, and h is stored in whole 16-byte vectors."""
    args = [a.to("meta") for a in inputs("residual_rmsnorm", (8192,), 4096, torch.bfloat16, specials=False)]
    k = bt.jit(residual_rmsnorm, target=SM90, cache=False).compile(*args)
    source = k.source
    assert "x_local" in source and "residual_local" in source, source[:4000]
    h = re.findall(r"\bT_add\w*(?<!_local)_ptr\b", source)[0]  # the sum's global buffer
    stores = re.findall(rf"\*\(uint4\*\)\({h} \+ [^;]*\) = ", source)
    assert len(stores) == 4 and not re.search(rf"= [^;]*\b{h}\b", source), source  # stored, never loaded


# -- against torch: any width, half dtypes, specials, empty and symbolic sizes --------------------------

@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(list(PROGRAMS)), lead=st.sampled_from([(0,), (1,), (7,), (64,), (2, 5)]),
       width=st.sampled_from([1, 3, 16, 97, 139, 1024, 4099]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_side_outputs_match_torch(name, lead, width, dtype):
    fn = PROGRAMS[name][0]
    args = inputs(name, lead, width, dtype)
    reference = [a.float() for a in args] if dtype != torch.float32 else args
    got = bt.jit(fn, target="cpu", cache=False)(*args)
    want = fn(*reference)
    for g, w in zip(got, want):
        w = w if w.dtype == torch.int8 else w.to(g.dtype)
        assert g.shape == w.shape and g.dtype == w.dtype
    if name == "int8_quantise":
        # the scale in the program's dtype divides x in it: compare with torch in that dtype
        assert_like_torch(fn, args, got, TOLERANCE[name])
    else:
        for g, w in zip(got, want):
            torch.testing.assert_close(g.float(), w.float(), equal_nan=True, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rows_of_many_thousands(dtype):
    """Long half rows, summed in float32: h in the program's dtype exactly as torch rounds it."""
    args = inputs("residual_rmsnorm", (6,), 50257, dtype)
    out, h = bt.jit(residual_rmsnorm, target="cpu", cache=False)(*args)
    torch.testing.assert_close(h, args[0] + args[1], equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(out, residual_rmsnorm(*args)[0], equal_nan=True, **TOL[dtype])


def residual_rmsnorm_any(x: bt.Tensor(("n", "w"), "float32"), residual: bt.Tensor(("n", "w"), "float32"),
                         weight: bt.Tensor(("w",), "float32")):
    return residual_rmsnorm(x, residual, weight)


def int8_quantise_any(x: bt.Tensor(("n", "w"), "float32")):
    return int8_quantise(x)


@pytest.mark.parametrize("rows, width", [(0, 9), (1, 1), (5, 7), (9, 17), (8, 139), (3, 2035)])
def test_symbolic_sizes(rows, width):
    f, g = bt.jit(residual_rmsnorm_any, target="cpu"), bt.jit(int8_quantise_any, target="cpu")
    args = inputs("residual_rmsnorm", (rows,), width)
    assert_like_torch(residual_rmsnorm, args, f(*args), TOL[torch.float32])
    args = inputs("int8_quantise", (rows,), width)
    assert_like_torch(int8_quantise, args, g(*args), TOLERANCE["int8_quantise"])
    assert len(f.compile(*inputs("residual_rmsnorm", (rows,), width)).fusion) == 1


def test_symbolic_sizes_for_sm90():
    args = [torch.empty(16, 64), torch.empty(16, 64), torch.empty(64)]
    k = bt.jit(residual_rmsnorm_any, target=SM90, cache=False).compile(*[a.to("meta") for a in args])
    assert len(k.fusion) == 1 and k.fusion[0].rule in GPU_ROWS, str(k.fusion)


# -- (index, value) pairs among the row's blocks -------------------------------------------------------

def softmax_and_argmax(x):
    p = torch.softmax(x, -1)
    return p, p.argmax(-1)


def centred_and_max(x):
    d = x - x.mean(-1, keepdim=True)
    values, indices = d.max(-1)
    return d, values, indices


@pytest.mark.parametrize("fn", [softmax_and_argmax, centred_and_max])
@pytest.mark.parametrize("shape", [(3, 7), (256, 100), (4, 100003)])
def test_pairs_with_other_blocks_are_rows_in_parallel(fn, shape):
    """An argmax read after the softmax it reduces: CPUReduction computes every block of a row in one
    parallel iteration, the pair reduced in order (no vectors of partial pairs), so the first index
    of the maximum, or of a NaN, is torch's; a few long rows too (not cut into chunk-local pairs)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    x[1, 5], x[2, :], x[0, 3], x[0, 4] = math.nan, -math.inf, 50.0, 50.0
    k = bt.jit(fn, target="cpu", cache=False).compile(x)
    assert all(kernel.rule == "CPUReduction" for kernel in k.fusion), str(k.fusion)
    for got, want in zip(k(x), fn(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
    if fn is softmax_and_argmax:
        assert len(k.fusion) == 1
        gpu = bt.jit(fn, target=SM90, cache=False).compile(x.to("meta")).fusion
        assert len(gpu) == 1 and gpu[0].rule in GPU_ROWS | {"SplitReduction"}, str(gpu)


# -- what stays apart ------------------------------------------------------------------------------

def read_before_the_norm(x, w):
    h = x * 2.0
    early = h.sum()                 # read before the row kernel's last op, by another kernel
    return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w + early


def test_a_value_read_before_the_group_ends_is_its_own_kernel():
    """The group's call sits where its last op was: a result read before that stays a kernel of its own."""
    args = inputs("residual_rmsnorm", (16,), 64)[::2]
    k = bt.jit(read_before_the_norm, target="cpu", cache=False).compile(*args)
    assert len(k.fusion) >= 2 and all(len(row.ops) for row in row_kernels(k.fusion))
    torch.testing.assert_close(k(*args), read_before_the_norm(*args), equal_nan=True, rtol=1e-4, atol=1e-4)


def sum_and_squares(x):
    return x.sum(-1), (x * x).sum(-1)


def softmax_and_its_top(logits):
    probs = torch.softmax(logits, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)


def moments(x):
    return x.mean(-1), x.std(-1), x.amax(-1), x.argmin(-1, keepdim=True)


@pytest.mark.filterwarnings(r"ignore:std\(\)")  # torch's, for the empty batch (a colon would split the filter)
@pytest.mark.parametrize("fn", [sum_and_squares, softmax_and_its_top, moments], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_reductions_side_by_side_are_one_kernel_writing_each_result(fn, dtype):
    """Reductions over the same rows, none reading another's result, read the rows once in one row
    kernel that writes every result, as torch's: NaN rows, ties, an empty batch, half rows."""
    x = torch.randn(37, 1000).to(dtype)
    x[3, 17], x[5] = float("nan"), 2.0
    k = bt.jit(fn, target="cpu", cache=False)
    assert [kk.rule for kk in k.compile(x).fusion] == ["CPUReduction"], str(k.compile(x).fusion)
    for args in ((x,), (x[:0],), (x[:, ::2],)):
        for got, want in zip(k(*args), fn(*args)):
            torch.testing.assert_close(got, want, equal_nan=True, atol=2e-2 if dtype != torch.float32 else 1e-5,
                                       rtol=2e-2 if dtype != torch.float32 else 1e-5)
    gpu = bt.jit(fn, target=SM90, cache=False).compile(x.to("meta"))
    assert [kk.rule for kk in gpu.fusion] == ["InnerReduction"], str(gpu.fusion)


# -- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("lead, width, dtype", [((4096,), 4096, torch.bfloat16), ((7,), 4099, torch.float32),
                                               ((2, 33), 1000, torch.float16)])
def test_gpu_side_outputs_agree_with_torch(name, lead, width, dtype):
    fn = PROGRAMS[name][0]
    args = [a.cuda() for a in inputs(name, lead, width, dtype)]
    got = bt.jit(fn, target="gpu")(*args)
    reference = [a.float() for a in args] if dtype != torch.float32 else args
    for g, w in zip(got, fn(*reference)):
        if g.dtype == torch.int8:
            continue  # the scale in the program's dtype: compared below
        torch.testing.assert_close(g.float(), w.float(), equal_nan=True, **TOL[dtype])
    if name == "int8_quantise":
        assert_like_torch(fn, args, got, TOLERANCE[name])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(32768, 64), (4, 100003)])
def test_gpu_softmax_and_argmax(shape):
    x = torch.randn(*shape, device="cuda")
    x[1, 5] = math.nan
    for got, want in zip(bt.jit(softmax_and_argmax, target="gpu")(x), softmax_and_argmax(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
