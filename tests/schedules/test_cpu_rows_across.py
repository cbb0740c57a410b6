"""CPUReduction on rows too short for vectors of their own (cpu_reduction.py, `_rows_across`): a
vector's lanes are rows, each row reduced in order by its own lane, steps of rows in parallel, the
last step's lanes past the end clamped to the last row. Every result against torch over generated
row widths and counts, float32/float16/bfloat16, NaN and inf, masks, symbolic row counts."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=2e-2),
       torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def masked_softmax_norm(x, mask, w, bias):
    h = x.masked_fill(mask, -1e4)
    h = torch.softmax(h, dim=-1)
    h = h / h.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    return h * w + bias


def norm_log_softmax(x):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    h = d * torch.rsqrt(d.pow(2).mean(-1, keepdim=True) + 1e-6)
    return F.log_softmax(torch.relu(torch.log1p(h.abs()) * 0.5), dim=-1)


def softmax_any(x: bt.Tensor(("n", 7), "float32")):
    return torch.softmax(x, dim=-1)


def with_specials(shape, dtype, seed=0):
    """Random rows with a NaN, an inf, a -inf and a row of -inf where there are rows enough."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3
    flat = x.view(-1, shape[-1])
    if flat.shape[0] >= 4:
        flat[0, 0], flat[1, -1], flat[2, shape[-1] // 2], flat[3] = math.nan, math.inf, -math.inf, -math.inf
    return x.to(dtype)


def reference(f, *args):
    """torch in float32 (a fused kernel keeps float32 inside), rounded to the input's dtype."""
    return f(*[a.float() if a.is_floating_point() else a for a in args]).to(args[0].dtype)


def assert_like_torch(got, f, *args, dtype):
    """Each element as torch computes it in float32 (rounded once) or in the inputs' own dtype (each op
    rounded): they differ past any tolerance where a row is ill-conditioned (a variance of two half
    values 0.002 apart, divided into their difference), and the kernel may round where either does."""
    tol = TOL[dtype]
    near = torch.zeros(got.shape, dtype=torch.bool)
    for want in (reference(f, *args), f(*args)):
        g, w = got.double(), want.double()
        near |= ((g - w).abs() <= tol["atol"] + tol["rtol"] * w.abs()) | (g.isnan() & w.isnan()) | (g == w)
    assert near.all(), (got[~near], reference(f, *args)[~near], f(*args)[~near])


def scheduled(k) -> str:
    (kernel,) = [kernel for kernel in k.fusion if kernel.rule != "none"]
    assert kernel.rule == "CPUReduction", kernel
    return k.stages["schedule"]


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 300), width=st.integers(1, 40), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 9))
def test_masked_softmax_then_norm_matches_torch(rows, width, dtype, seed):
    x = with_specials((rows, width), dtype, seed)
    mask = torch.rand(1, width, generator=torch.Generator().manual_seed(seed)) > 0.7
    w, bias = torch.randn(width).to(dtype), torch.randn(width).to(dtype)
    k = bt.jit(target="cpu")(masked_softmax_norm).compile(x, mask, w, bias)
    torch.testing.assert_close(k(x, mask, w, bias), reference(masked_softmax_norm, x, mask, w, bias),
                               equal_nan=True, **TOL[dtype])


@settings(max_examples=6, deadline=None)
@given(a=st.integers(1, 40), b=st.integers(1, 60), width=st.integers(1, 40), dtype=st.sampled_from(DTYPES))
def test_rows_of_two_axes_match_torch(a, b, width, dtype):
    """Rows over two axes (401 x 49 rows of 7 in the fuzzer's p14) made one axis before the steps."""
    x = with_specials((a, b, width), dtype)
    k = bt.jit(target="cpu")(norm_log_softmax).compile(x)
    assert_like_torch(k(x), norm_log_softmax, x, dtype=dtype)


def test_rows_of_seven_are_vector_lanes():
    """Rows of 7 (a ragged 1,001 of them): every block's loop over the row's 7 elements holds a
    vectorised loop over rows, no predicate is left (the last step clamped), and the exp is one
    vector polynomial: the row-at-a-time schedule ran it, and a branch per max, per element."""
    x = with_specials((1001, 7), torch.float32)
    mask, w, bias = torch.zeros(1, 7, dtype=torch.bool), torch.randn(7), torch.randn(7)
    mask[0, 3] = True
    k = bt.jit(target="cpu")(masked_softmax_norm).compile(x, mask, w, bias)
    text = scheduled(k)
    assert text.count("T.vectorized") >= 8 and "T.where" not in text and "T.min(" in text, text
    assert re.search(r"@llvm\.fmuladd\.v(8|16)f32", k.source)
    torch.testing.assert_close(k(x, mask, w, bias), masked_softmax_norm(x, mask, w, bias), equal_nan=True,
                               **TOL[torch.float32])


@pytest.mark.parametrize("rows", [0, 1, 5, 16, 17, 1000])
def test_symbolic_row_counts_match_torch(rows):
    """One compiled kernel for any number of rows of 7, from none to several ragged steps."""
    x = with_specials((rows, 7), torch.float32)
    torch.testing.assert_close(bt.jit(target="cpu")(softmax_any)(x), torch.softmax(x, -1), equal_nan=True,
                               **TOL[torch.float32])
