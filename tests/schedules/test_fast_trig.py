"""The vectorisable float32 sin and cos of CPU builds (schedules/fast_math.py) against torch: within 2
ulp over [-1e4, 1e4], every small binade and the floats nearest the zeros up to TRIG_BOUND; libm
(in a branch) for vectors with a lane beyond; torch's special values; float16/bfloat16; float64 and
scalar loops keep TVM's lowering."""
import math
import re

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import babytriton as bt
from babytriton.testing.ulp import max_ulp
from babytriton.schedules.fast_math import TRIG_BOUND

SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38,
            math.pi / 4, math.pi / 2, math.pi, 1e4, -1e4, TRIG_BOUND, -TRIG_BOUND]


def trig(x: bt.Tensor((4096 * 256 + 48,), "float32")):
    return torch.sin(x), torch.cos(x)


def trig_any(x):
    return torch.sin(x), torch.cos(x)


def cos_sigmoid(x):
    return torch.cos(x) * torch.sigmoid(x)


TRIG = bt.jit(target="cpu")(trig)
ANY = bt.jit(target="cpu")(trig_any)
N = 4096 * 256 + 48


def vectorised(x: torch.Tensor):
    """sin and cos of x by ANY in vectors (CPUElementwise vectorises 1024-multiples; scalar loops
    keep libm): x padded with zeros, the results cut back."""
    padded = torch.cat([x, x.new_zeros(-len(x) % 1024 or (1024 if len(x) == 0 else 0))])
    assert "vector" in str(ANY.compile(padded).fusion)
    return tuple(r[:len(x)] for r in ANY(padded))


def near_zeros(bound: float) -> torch.Tensor:
    """The 5 floats around each k pi/2 up to `bound`, both signs: where sin or cos is tiny, so any bit
    the reduction loses shows."""
    k = torch.arange(1, int(bound / (math.pi / 2)), dtype=torch.float64)
    bits = (k * (math.pi / 2)).float().view(torch.int32)
    near = torch.cat([(bits + d).view(torch.float32) for d in (-2, -1, 0, 1, 2)])
    near = near[near.abs() <= bound]
    return torch.cat([near, -near])


def sweep() -> torch.Tensor:
    """N float32: evenly over [-1e4, 1e4], the floats near the zeros, every binade from 1e-45 to 1e4
    evenly in bit space (both signs), the specials."""
    near = near_zeros(TRIG_BOUND)
    small = torch.linspace(1, 0x461C4000, 1 << 16, dtype=torch.float64).to(torch.int32).view(torch.float32)
    fixed = torch.cat([near, small, -small, torch.tensor(SPECIALS)])
    dense = torch.linspace(-1e4, 1e4, N - len(fixed), dtype=torch.float64).float()
    return torch.cat([dense, fixed])


def test_sin_and_cos_within_2_ulp_with_torchs_specials():
    x = sweep()
    assert "vector" in str(TRIG.compile(x).fusion)
    sin, cos = TRIG(x)
    ulps = max_ulp(sin, torch.sin(x)), max_ulp(cos, torch.cos(x))
    print("max ulp vs torch (sin, cos):", ulps)
    assert max(ulps) <= 2
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30])
    sin, cos = vectorised(special)
    assert torch.equal(sin.view(torch.int32)[:2], torch.tensor([0, -(1 << 31)], dtype=torch.int32))  # sign of 0 kept
    assert sin[2:5].isnan().all() and cos[2:5].isnan().all() and torch.equal(cos[:2], torch.ones(2))
    assert torch.equal(sin[5:], special[5:]) and torch.equal(cos[5:], torch.ones(2))


def test_near_the_zeros_within_an_ulp_of_the_exact_result():
    x = near_zeros(TRIG_BOUND)
    sin, cos = vectorised(x)
    assert max_ulp(sin, torch.sin(x.double()).float()) <= 1
    assert max_ulp(cos, torch.cos(x.double()).float()) <= 1


def test_vectors_with_a_lane_beyond_the_bound_take_libm():
    """One huge lane among 16 (and all of them huge): its vector is computed by libm, the others not."""
    x = torch.linspace(-5, 5, 4099)
    big = torch.tensor([TRIG_BOUND * 1.01, -5e4, 1e5, 1e6, 1.2345e9, 3e20, -3.4028235e38, 2.0 ** 100])
    x[::512][:len(big)] = big
    x = torch.cat([x, big.repeat(4)])
    sin, cos = vectorised(x)
    assert max_ulp(sin, torch.sin(x)) <= 2 and max_ulp(cos, torch.cos(x)) <= 2


def test_every_half_and_bfloat16_value_rounds_as_torch():
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    for dtype in (torch.float16, torch.bfloat16):
        values = x.view(dtype)
        for got, want in zip(vectorised(values), (torch.sin(values), torch.cos(values))):
            assert got.dtype == dtype
            # computed in float32 and rounded once, as torch does: an ulp of float32 can move a rounding
            assert max_ulp(got.float(), want.float()) <= 1 << (23 - (10 if dtype == torch.float16 else 7))
            assert (got != want).logical_and(~want.isnan()).sum() <= 8


def libm_blocks(source: str) -> list:
    """The labels of the LLVM basic blocks that call sin or cos on float32 vectors."""
    blocks, label = [], None
    for line in source.splitlines():
        label = re.match(r"([\w.]+):", line).group(1) if re.match(r"[\w.]+:", line) else label
        if re.search(r"call <\d+ x float> @llvm\.(sin|cos)\.", line):
            blocks.append(label)
    return blocks


def test_vectorised_float32_sin_and_cos_call_libm_only_in_the_guarded_branch():
    """The polynomial in vectors; libm (llvm.sin/cos) only in blocks a conditional branch enters
    (LLVM folds the reduce.or of the test into a bitcast of the lane mask)."""
    x = torch.rand(4096)
    source = bt.jit(target="cpu")(cos_sigmoid).compile(x).source
    assert re.search(r"fmuladd\.v\d+f32", source)
    assert not re.search(r"@(sinf|cosf)\b", source)
    blocks = libm_blocks(source)
    assert blocks
    for block in blocks:
        entries = re.findall(rf"br [^\n]*label %{re.escape(block)}\b", source)
        assert entries and all(entry.startswith("br i1") for entry in entries), (block, entries)
    torch.testing.assert_close(bt.jit(target="cpu")(cos_sigmoid)(x), cos_sigmoid(x), rtol=3e-7, atol=1e-7)


def sine_after_bfloat16_gelu(x, y):
    h = torch.nn.functional.gelu(x)
    h = h * torch.sigmoid(1.702 * h)
    return torch.sin(torch.maximum(h, y))


def test_a_float32_block_beside_bfloat16_ones_takes_the_polynomial():
    """p121: the bfloat16 GELU is a block of its own (read twice); the sine's block reads float32 only,
    and takes the vector form, whereas any bfloat16 in the kernel had kept every call of it as libm's
    (1.0 ms where eager took 0.35; 0.21 now, one thread)."""
    x, y = torch.randn(39, 4, 768).bfloat16(), torch.randn(39, 4, 768)
    y[0, 0, :5] = float("nan")
    k = bt.jit(target="cpu")(sine_after_bfloat16_gelu).compile(x, y)
    blocks = libm_blocks(k.source)
    for block in blocks:
        entries = re.findall(rf"br [^\n]*label %{re.escape(block)}\b", k.source)
        assert entries and all(entry.startswith("br i1") for entry in entries), (block, entries)
    # (bfloat16 steps: torch rounds each op, the kernel its blocks)
    torch.testing.assert_close(k(x, y), sine_after_bfloat16_gelu(x, y), rtol=2e-2, atol=2e-2, equal_nan=True)


def test_float64_keeps_tvms_lowering():
    x = torch.linspace(-1e5, 1e5, 4099, dtype=torch.float64)
    k = bt.jit(target="cpu")(trig_any)
    assert "llvm.vector.reduce.or" not in k.compile(x).source
    for got, want in zip(k(x), (torch.sin(x), torch.cos(x))):
        torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15)


@settings(max_examples=15, deadline=None)
@given(arrays(np.float32, st.integers(0, 300), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)))
def test_sin_and_cos_of_random_floats_match_torch(values):
    x = torch.from_numpy(values)
    sin, cos = vectorised(x)
    assert max_ulp(sin, torch.sin(x)) <= 2 and max_ulp(cos, torch.cos(x)) <= 2
