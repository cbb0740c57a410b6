"""Argmax and argmin along rows on a CPU as the row's max/min and the first index holding it
(babytriton/passes/argmax_as_max.py): torch's indices for NaN, ±inf, ties and every dtype, in one
vectorised row kernel; whole tensors and outer axes keep the (index, value) pair."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
NAN, INF = float("nan"), float("inf")


def last_axis(x):
    return x.argmax(-1), torch.argmin(x, -1, keepdim=True)


def whole(x):
    return x.argmax(), torch.argmin(x, keepdim=True)


def values_and_indices(x):
    return x.max(-1), x.min(dim=-1, keepdim=True)


FUNCTIONS = {f.__name__: bt.jit(f, target="cpu") for f in (last_axis, whole, values_and_indices)}


def _specials(shape, dtype, data) -> torch.Tensor:
    """Values of `dtype` with NaN, ±inf, ties and ±0 placed where hypothesis says."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99)))) * 4
    flat = x.view(-1)
    for _ in range(data.draw(st.integers(0, 6))):
        where = data.draw(st.integers(0, flat.numel() - 1))
        other = data.draw(st.integers(0, flat.numel() - 1))
        flat[where] = data.draw(st.sampled_from([NAN, INF, -INF, 0.0, -0.0, float(flat[other])]))
    if data.draw(st.booleans()):
        x[..., :] = -INF if data.draw(st.booleans()) else 2.0   # a row all -inf, or all tied
    if dtype.is_floating_point:
        return x.to(dtype)
    return x.nan_to_num(0, 100, -100).to(dtype)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(FUNCTIONS)), lead=st.lists(st.integers(1, 5), min_size=1, max_size=2),
       width=st.sampled_from([2, 3, 8, 17, 64, 129]), data=st.data(),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int32]))
def test_indices_are_torchs(name, lead, width, data, dtype):
    x = _specials((*lead, width), dtype, data)
    got, want = FUNCTIONS[name](x), globals()[name](x)
    for g, w in zip(got, want):
        if isinstance(w, torch.return_types.max | torch.return_types.min):
            torch.testing.assert_close(g[0], w[0], equal_nan=True, rtol=0, atol=0)
            g, w = g[1], w[1]
        assert torch.equal(g, w), (x, g, w)


def test_one_vectorised_row_kernel_where_the_pair_was_a_scalar_loop():
    k = FUNCTIONS["last_axis"].compile(torch.randn(300, 64))
    assert [kk.rule for kk in k.fusion] == ["CPUReduction"], str(k.fusion)
    assert " x vector " in k.fusion[0].launch and "peak" in k.stages["LegalizeOps"], str(k.fusion)


@pytest.mark.parametrize("m", [1, 5, 300])
def test_symbolic_row_widths(m):
    def argmax_rows(x: bt.Tensor(("n", "m"), "float32")):
        return x.argmax(-1)
    x = torch.randn(4, m)
    x[1, m // 2] = NAN
    assert torch.equal(bt.jit(argmax_rows, target="cpu", cache=False)(x), x.argmax(-1))


def over_columns(x):
    return x.argmax(0)


def over_rows(x):
    return x.argmax(-1)


def test_outer_axes_whole_tensors_and_gpus_keep_the_pair():
    """Over an outer axis each lane holds a column's pair (CPUOuterReduction); a whole tensor's pair
    is cut into parallel chunks (CPUReduction); on a GPU the warps combine pairs (InnerReduction):
    none is rewritten."""
    for fn, x in ((over_columns, torch.randn(64, 256)), (whole, torch.randn(40000))):
        k = bt.jit(fn, target="cpu", cache=False).compile(x)
        assert "argmax" in k.stages["schedule"] and "peak" not in k.stages["LegalizeOps"]
        assert {kk.rule for kk in k.fusion} <= {"CPUOuterReduction", "CPUReduction"}, str(k.fusion)
    gpu = bt.jit(over_rows, target=SM90, cache=False).compile(torch.empty(64, 256, device="meta"))
    assert "argmax" in gpu.stages["LegalizeOps"] and "T.min" not in gpu.stages["schedule"]


def of_computed_values(x, s: float, b, mask):
    y = torch.where(mask, x * s, x + 2.0) + b
    return y.argmax(-1), (y == y.amax(-1, keepdim=True)).sum(-1)


@settings(max_examples=20, deadline=None)
@given(width=st.sampled_from([5, 17, 70]), seed=st.integers(0, 10_000), s=st.floats(-3, 3),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_values_computed_in_the_kernel_are_compared_as_stored(width, seed, s, dtype):
    """The max and the test for it read one stored copy of y (schedules.analysis.compared_with_its_reduction):
    computed in each, LLVM fused `x * s + b` into a multiply-add in one copy only, and a row's max
    equalled none of its elements (its index came back as 2**63 - 1)."""
    g = torch.Generator().manual_seed(seed)
    x, b = torch.randn(9, width, generator=g, dtype=dtype), torch.randn(width, generator=g, dtype=dtype)
    mask = torch.rand(9, width, generator=g) > 0.5
    got = bt.jit(of_computed_values, target="cpu")(x, s, b, mask)
    want = of_computed_values(x, s, b, mask)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (got, want)
