"""CPUOuterReduction's schedules compared with torch: element-wise blocks over odd rows of kept
columns (a row loop per outer index, in parallel), per-column blocks kept as buffers (a quantisation's
scale), narrow columns as one short vector, and argmax/argmin (index, value) pairs over outer or
middle axes (columns in parallel tiles, each reduced in order: torch's first index of the maximum,
and NaN wins), with NaN, ties, odd and prime sizes, float16/bfloat16 and symbolic sizes."""
import pytest
import torch
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt


def softmax0(x):
    h = x.to(torch.float32)
    e = torch.exp(h - h.amax(0, keepdim=True))
    return (e / e.sum(0, keepdim=True)).to(x.dtype)


def quantise(x):
    scale = x.abs().amax(dim=0, keepdim=True).clamp_min(1e-5) / 127.0
    return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8)


def sum_few_columns(x):
    return x.sum((0, 1))


def arg_pairs(x):
    return torch.argmax(x, dim=0), torch.argmin(x, dim=1), x.max(dim=0)


def arg_symbolic(x: bt.Tensor(("n", 37), "float32")):
    return torch.argmax(x, dim=0), torch.argmin(x, dim=0)


def _rules(k) -> set:
    return {kernel.rule for kernel in k.fusion}


def _prim_funcs(k):
    return [(gv.name_hint, fn) for gv, fn in k.module.functions_items() if isinstance(fn, tvm.tirx.PrimFunc)]


_softmax0 = bt.jit(target="cpu")(softmax0)
_quantise = bt.jit(target="cpu")(quantise)
_arg_pairs = bt.jit(target="cpu")(arg_pairs)


@pytest.mark.parametrize("shape, dtype", [((37, 12, 19), torch.float16), ((854, 12, 197), torch.float32),
                                          ((5, 3, 7), torch.bfloat16), ((1, 1, 1), torch.float32)])
def test_softmax_over_the_outer_axis_of_odd_rows_matches_torch(shape, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    if x.numel() > 3:
        x.view(-1)[3] = float("inf")
        x.view(-1)[-1] = float("nan")
    torch.testing.assert_close(_softmax0(x), softmax0(x), equal_nan=True, rtol=2e-2 if dtype != torch.float32 else 1e-5,
                               atol=1e-3 if dtype != torch.float32 else 1e-6)


def test_odd_rows_epilogue_runs_rows_in_parallel_not_single_elements():
    """(854, 12, 197): the division loops over 854 rows in parallel, each a plain loop of 2364
    contiguous elements (LLVM vectorises it with a tail), not 2 million single elements."""
    k = _softmax0.compile(torch.randn(854, 12, 197))
    text = "\n".join(fn.script() for _, fn in _prim_funcs(k))
    assert "T.parallel(T.int64(854))" in text and "range(T.int64(2364))" in text, text
    assert "T.parallel(T.int64(2018856))" not in text


@pytest.mark.parametrize("shape, dtype", [((556, 64, 96), torch.float16), ((13, 7, 5), torch.float32)])
def test_quantise_keeps_the_per_column_scale_as_a_buffer(shape, dtype):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[0, 0, 0] = 0.0  # a column whose scale is clamped
    k = _quantise.compile(x)
    assert "CPUOuterReduction" in _rules(k), k.fusion
    [(_, fn)] = [(n, fn) for n, fn in _prim_funcs(k) if "max" in n]
    # the column maximum and the scale computed from it, each a (1, 7, 5)-sized buffer of its own
    assert fn.script().count("T.sblock_alloc_buffer") >= 2, fn.script()
    assert torch.equal(_quantise(x), quantise(x))


def test_few_columns_reduce_as_one_short_vector():
    """8 kept columns (sum over (0, 1) of (n, 100, 8)): a vector of 8 even where registers hold 16."""
    f = bt.jit(target="cpu")(sum_few_columns)
    x = torch.randn(733, 100, 8, generator=torch.Generator().manual_seed(2))
    k = f.compile(x)
    [kernel] = k.fusion
    assert kernel.rule == "CPUOuterReduction" and kernel.launch.endswith("vector 8"), kernel
    torch.testing.assert_close(f(x), x.sum((0, 1)), rtol=1e-4, atol=1e-3)


def _with_ties_and_nans(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype)  # few values: many ties
    if x.numel() > 4:
        flat = x.view(-1)
        flat[torch.randint(0, flat.numel(), (3,), generator=g)] = float("nan")
        flat[1] = float("inf")
        flat[2] = float("-inf")
    return x


def _check_pairs(x):
    got, want = _arg_pairs(x), arg_pairs(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[2][0], want[2].values, equal_nan=True)
    assert torch.equal(got[2][1], want[2].indices)


@pytest.mark.parametrize("shape, dtype", [((805, 12, 64), torch.float16), ((31, 7, 173), torch.float32),
                                          ((2, 3, 5), torch.bfloat16), ((1, 1, 1), torch.float32)])
def test_argmax_argmin_over_outer_and_middle_axes_match_torch(shape, dtype):
    x = _with_ties_and_nans(shape, dtype, seed=3)
    _check_pairs(x)
    if x.numel() > 1000 and shape[-1] % 16 == 0:  # whole vectors of columns (else Dlight's columns)
        assert _rules(_arg_pairs.compile(x)) <= {"CPUOuterReduction", "CPUElementwise"}, _arg_pairs.compile(x).fusion


@settings(max_examples=6, deadline=None)
@given(a=st.integers(1, 40), b=st.integers(1, 9), c=st.integers(1, 70), seed=st.integers(0, 99),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_generated_argmax_argmin_match_torch(a, b, c, seed, dtype):
    _check_pairs(_with_ties_and_nans((a, b, c), dtype, seed))


def test_symbolic_argmax_argmin_match_torch():
    f = bt.jit(target="cpu")(arg_symbolic)
    for n in (1, 5, 300):
        x = _with_ties_and_nans((n, 37), torch.float32, seed=n)
        got = f(x)
        assert torch.equal(got[0], torch.argmax(x, dim=0)) and torch.equal(got[1], torch.argmin(x, dim=0))


def logsumexp0(x):
    return torch.logsumexp(x, dim=0), x.amax(0)


_logsumexp0 = bt.jit(target="cpu")(logsumexp0)


@settings(max_examples=4, deadline=None)
@given(rows=st.integers(17, 70), width=st.integers(2048, 10000).map(lambda k: 2 * k + 1), seed=st.integers(0, 100))
def test_odd_widths_are_whole_vectors_and_a_tail(rows, width, seed):
    """Reductions over the rows of an odd number of columns, cut into chunks of rows: the last tile
    of columns is whole vectors and a scalar tail (`with_tails`, its chunk's bound kept), not a
    predicate on the lanes that TVM ran lane by lane; results torch's with NaN and infinities."""
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed)) * 3
    x[0, 5], x[rows - 1, width - 1], x[3, width - 2] = float("nan"), float("inf"), float("-inf")
    k = _logsumexp0.compile(x)
    assert "CPUOuterReduction" in _rules(k)
    scheduled = k.stages["schedule"]
    assert "_update_tail\"" in scheduled, scheduled
    for got, expected in zip(k(x), logsumexp0(x)):
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_odd_half_widths_match_torch(dtype):
    x = (torch.randn(40, 13445) * 3).to(dtype)
    x[0, 13444] = float("nan")
    for got, expected in zip(_logsumexp0(x), logsumexp0(x.float())):
        torch.testing.assert_close(got.float(), expected.to(dtype).float(), equal_nan=True, rtol=2e-2, atol=2e-2)
