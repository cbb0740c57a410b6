"""Reductions in float16/bfloat16 accumulate in float32 and round once, as torch does: library ops,
tensor methods, ops that reduce inside (softmax, norms) and user-written compositions, compiled
(CPU, and CUDA source for the GPU) and eager."""
import re

import pytest
import torch

from tvm.relax.op import cumsum, std, variance

import babytriton as bt
from babytriton import exp, layer_norm, log, log_softmax, rms_norm, softmax

HALVES = [torch.float16, torch.bfloat16]
TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def user_softmax(x):
    e = exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_user_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def cross_entropy(logits, picked):
    m = logits.max(axis=-1, keepdims=True)
    lse = log(exp(logits - m).sum(axis=-1, keepdims=True)) + m
    return (lse - picked).mean()


def torch_cross_entropy(logits, picked):
    m = logits.amax(dim=-1, keepdim=True)
    lse = torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True)) + m
    return (lse - picked).mean()


def t_sum(x): return x.sum()
def t_sum_rows(x): return x.sum(axis=-1)
def t_mean(x): return x.mean()
def t_mean_rows(x): return x.mean(axis=-1) * 2
def t_max(x): return x.max(axis=-1)
def t_min(x): return x.min()
def t_prod(x): return x.prod(axis=-1)
def t_variance(x): return variance(x, axis=-1)
def t_std(x): return std(x + 100, axis=-1)
def t_softmax(x): return softmax(x, axis=-1)
def t_log_softmax(x): return log_softmax(x, axis=-1)
def t_layer_norm(x, g, b): return layer_norm(x, g, b, axes=-1)
def t_rms_norm(x, g): return rms_norm(x, g, axes=-1)
def t_cumsum(x): return cumsum(x, axis=0)


# babytriton function -> torch reference; x is (rows, long row)
CASES = {
    t_sum: lambda x: x.sum(),
    t_sum_rows: lambda x: x.sum(dim=-1),
    t_mean: lambda x: x.mean(),
    t_mean_rows: lambda x: x.mean(dim=-1) * 2,
    t_max: lambda x: x.amax(dim=-1),
    t_min: lambda x: x.amin(),
    # torch's CPU float16 prod multiplies in float16 (its bfloat16 and CUDA ones in float32): float32's
    t_prod: lambda x: x.float().prod(dim=-1).to(x.dtype),
    t_variance: lambda x: torch.var(x, dim=-1, correction=0),
    t_std: lambda x: torch.std(x + 100, dim=-1, correction=0),
    t_softmax: lambda x: torch.softmax(x, dim=-1),
    t_log_softmax: lambda x: torch.log_softmax(x, dim=-1),
    user_softmax: torch_user_softmax,
}


def _compile(fn):
    return bt.jit(cache=False)(fn)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("ours", CASES, ids=lambda f: f.__name__)
def test_half_reductions_match_torch(ours, dtype):
    theirs = CASES[ours]
    x = (torch.randn(3, 32000) + 0.5).to(dtype)
    if ours is t_prod:  # factors near 1, whose product stays finite
        x = (1 + torch.randn(3, 32000) / 256).to(dtype)
    want = theirs(x)
    got = _compile(ours)(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    torch.testing.assert_close(bt.jit(ours).eager(x).float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype,n", [(torch.float16, 4096), (torch.float16, 60000), (torch.bfloat16, 100000)])
def test_long_half_sum_is_torchs(dtype, n):
    x = torch.ones(n, dtype=dtype)
    got = _compile(t_sum)(x)
    assert got.item() == torch.sum(x).item() != n / 2  # one rounding at the end, not a stalled half sum
    assert _compile(t_mean)(x).item() == torch.mean(x).item() == 1.0


@pytest.mark.parametrize("dtype", HALVES)
def test_half_norms_match_torch(dtype):
    x = (torch.randn(4, 8192) * 3 + 5).to(dtype)
    g, b = torch.randn(8192).to(dtype), torch.randn(8192).to(dtype)
    got = _compile(t_layer_norm)(x, g, b)
    want = torch.nn.functional.layer_norm(x, (8192,), g, b)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    got = _compile(t_rms_norm)(x, g)
    want = torch.nn.functional.rms_norm(x, (8192,), g, eps=1e-5)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", HALVES)
def test_half_cross_entropy_over_a_large_vocabulary(dtype):
    logits = (torch.randn(8, 32000) * 4).to(dtype)
    picked = logits[torch.arange(8), torch.randint(0, 32000, (8,))].reshape(8, 1)
    want = torch_cross_entropy(logits, picked)
    got = _compile(cross_entropy)(logits, picked)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    torch.testing.assert_close(bt.jit(cross_entropy).eager(logits, picked).float(), want.float(), **TOL[dtype])


def test_half_cumsum_matches_torch():
    x = torch.ones(5000, dtype=torch.float16)
    got = _compile(t_cumsum)(x)
    torch.testing.assert_close(got.float(), torch.cumsum(x, 0).float(), rtol=1e-3, atol=0)


def half_user_softmax(x: bt.Tensor((4, 32000), "float16")):
    e = exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def half_mean_times_two(x: bt.Tensor((4, 32000), "float16")):
    return x.mean(axis=-1) * 2


@pytest.mark.parametrize("fn,kernels", [(half_user_softmax, 1), (half_mean_times_two, 1)])
def test_cuda_accumulates_half_in_a_float_without_extra_kernels(fn, kernels):
    k = bt.jit(target={"kind": "cuda", "arch": "sm_90"}, cache=False)(fn).compile()
    assert len(re.findall(r"R\.call_tir", k.stages["FuseTIR"])) == kernels
    assert "Cast(\"float32\"" in k.stages["FuseTIR"] or 'T.Cast("float32"' in k.stages["FuseTIR"]
    bodies = re.findall(r'extern "C" __global__ void[^;{]*\{(.*?)\n\}', k.source, re.S)
    assert len(bodies) >= kernels  # a split reduction (few long rows) launches two CUDA kernels per PrimFunc
    assert any(re.search(r"\bfloat \w*red\w*\[", b) for b in bodies)  # a float accumulator


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("ours", [t_sum, t_mean_rows, t_softmax, t_variance, user_softmax], ids=lambda f: f.__name__)
def test_half_reductions_match_torch_on_the_gpu(ours, dtype):
    x = (torch.randn(3, 32000, device="cuda") + 0.5).to(dtype)
    want = CASES[ours](x)
    got = bt.jit(target="gpu", cache=False)(ours)(x)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    ones = torch.ones(100000, dtype=dtype, device="cuda")
    assert bt.jit(target="gpu", cache=False)(t_sum)(ones).item() == torch.sum(ones).item()


# --------------------------------------------------------------------------------------------------
# element-wise functions in float32 ("opmath"), rounded once
# --------------------------------------------------------------------------------------------------

def t_gelu(x): return bt.gelu(x)
def t_silu(x): return bt.silu(x)
def t_sigmoid(x): return bt.sigmoid(x)
def t_tanh(x): return bt.tanh(x)
def t_erf(x): return bt.erf(x)


OPMATH = {t_gelu: torch.nn.functional.gelu, t_silu: torch.nn.functional.silu, t_sigmoid: torch.sigmoid, t_tanh: torch.tanh, t_erf: torch.erf}
# one rounding of the float32 value: within one unit in the last place (math libraries differ
# there, and TVM's erf is off by up to 2e-7 where GELU's tail is tiny)
ULP = {torch.float16: dict(rtol=2 ** -10, atol=1e-6, equal_nan=True),
       torch.bfloat16: dict(rtol=2 ** -7, atol=1e-6, equal_nan=True)}


@pytest.mark.parametrize("ours", list(OPMATH), ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", HALVES)
def test_half_functions_round_once_like_torch(ours, dtype):
    reference = OPMATH[ours]
    # torch's CPU GELU of +inf is NaN (its vectorised erf form), which is no value to match
    specials = [0.0, -0.0, float("-inf"), float("nan")] + ([] if ours is t_gelu else [float("inf")])
    x = torch.cat([torch.linspace(-6, 6, 4093), torch.tensor(specials)]).to(dtype)
    compiled = bt.jit(target="cpu")(ours)
    torch.testing.assert_close(compiled(x), reference(x), **ULP[dtype])
    torch.testing.assert_close(compiled.eager(x), reference(x), **ULP[dtype])


@pytest.mark.parametrize("dtype", HALVES)
def test_half_gelu_computes_in_float32_in_the_cuda_source(dtype):
    def bias_gelu(x, b):
        return bt.gelu(x + b)
    x, b = torch.randn(512, 1024, dtype=dtype), torch.randn(1024, dtype=dtype)
    source = bt.jit(target={"kind": "cuda", "arch": "sm_90"})(bias_gelu).compile(x, b).source
    kernel = source[source.index('extern "C"'):]
    assert "erff(" in kernel and "herf(" not in kernel
    assert "*(uint4*)" in kernel  # eight halves a load, the erf lane by lane in registers
