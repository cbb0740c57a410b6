"""SplitReduction over row kernels of several reductions: a softmax, a norm or a variance of few long
rows is cut over blocks reduction after reduction (each in two launches), not one block a row."""
import re
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton import schedules

from test_schedules import SM90, nvcc_ptx


def softmax_of_all(x):
    return torch.softmax(30.0 * torch.tanh(x / 30.0), dim=-1)


def layer_norm_rows(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-5)


def group_norm(x):
    h = x.to(torch.float32)
    g = h.reshape(h.shape[0], 2, -1)
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    return ((g - mu) / torch.sqrt(var + 1e-5)).reshape(x.shape)


def log_softmax_rows(x):
    return F.log_softmax(x.float(), dim=-1)


def symbolic_softmax(x: bt.Tensor((3, "n"), "float32")):
    return torch.softmax(x, dim=-1)


CASES = [(softmax_of_all, (1545689,)), (layer_norm_rows, (4, 65536)), (group_norm, (4, 16, 49, 1536)),
         (log_softmax_rows, (60, 300007)), (layer_norm_rows, (128, 1 << 18))]


def _kernels(k):
    """(rule, launches) of each kernel that reduces."""
    return [(kk.rule, len(kk.cuda_kernels)) for kk in k.fusion if any(op in str(kk) for op in ("max", "sum", "mean"))]


@pytest.mark.parametrize("fn,shape", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_few_long_rows_are_split_over_blocks(fn, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = bt.jit(target=SM90)(fn).compile(torch.empty(shape, device="meta"))
    [(rule, launches)] = _kernels(k)
    assert rule == "SplitReduction" and launches >= 3, str(k.fusion)   # each reduction in two, then the rest
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("shape", [(8, 4096), (64, 32000), (32, 1 << 17), (129, 1 << 18)])
def test_short_or_many_rows_keep_one_launch(shape):
    """Rows short enough for a block each, or enough rows to fill the GPU: one launch reads each row
    once (the row rules)."""
    k = bt.jit(target=SM90)(layer_norm_rows).compile(torch.empty(shape, device="meta"))
    [(rule, launches)] = _kernels(k)
    assert rule != "SplitReduction" and launches == 1, str(k.fusion)


def test_symbolic_long_rows_are_split():
    k = bt.jit(target=SM90)(symbolic_softmax).compile()
    [(rule, launches)] = _kernels(k)
    assert rule == "SplitReduction" and launches >= 4, str(k.fusion)


@settings(max_examples=4, deadline=None)
@given(rows=st.integers(1, 128), length=st.integers(1 << 18, 1 << 19), which=st.sampled_from([0, 1, 3]))
def test_generated_few_long_rows_build(rows, length, which):
    fn = [softmax_of_all, layer_norm_rows, None, log_softmax_rows][which]
    k = bt.jit(target=SM90)(fn).compile(torch.empty(rows, length, device="meta"))
    assert [rule for rule, _ in _kernels(k)] == ["SplitReduction"], str(k.fusion)
    grid = max(int(g) for g in re.findall(r"grid (\d+)", str(k.fusion)))
    assert grid >= min(128, rows * 2), str(k.fusion)


@pytest.mark.gpu
@pytest.mark.parametrize("fn,shape", CASES + [(softmax_of_all, (1, 9001)), (layer_norm_rows, (3, 100003)),
                                              (symbolic_softmax, (3, 50000)), (symbolic_softmax, (3, 7))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_split_row_kernels_match_torch(fn, shape, dtype):
    if fn is symbolic_softmax and dtype != torch.float32:
        pytest.skip("annotated float32")
    x = (torch.randn(shape, device="cuda") * 3).to(dtype)
    x.view(-1)[-1] = float("nan")            # a NaN in the last row: that row only
    if x.dim() > 1 and x.shape[0] > 1:
        x[0, 0] = float("inf")
    got, want = bt.jit(target="gpu")(fn)(x), fn(x)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.float(), want.float(), equal_nan=True, **tol)
