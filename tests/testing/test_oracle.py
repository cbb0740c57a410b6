"""The fuzzer's torch oracle: babytriton programs rewritten into plain torch keep torch's meaning
(promotion, Python numbers, NaN) and babytriton's element-wise syntax."""
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from babytriton.testing import oracle

PROGRAM = '''
import torch
import babytriton as bt


@bt.jit(cache=False)
def helper(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x: bt.Tensor(("n", 3), "float32"), y, s: float, k: bt.constexpr):
    m = x.max(axis=1, keepdims=True)
    v = x if x > 0 else -x
    v += s
    both = (x > 0) and not (y < 1) or (0 < x < 1)
    n = bt.sum(y.astype("float32"), axis=0) + len(x) * k
    return v, both, m, x.T, n, helper(x, 1), y * s
'''


def same(a, b) -> bool:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    return True


def test_translation_keeps_babytriton_syntax_element_wise_and_torch_promotion():
    f = oracle.translate(PROGRAM).f
    x = torch.tensor([[1.0, -2.0, 0.5], [float("nan"), 3.0, -0.0]])
    y = torch.tensor([[0, 2, 1], [3, 1, 0]], dtype=torch.int32)
    v, both, m, xt, n, h, ys = f(x, y, 1.5, 2)
    assert same(v, torch.where(x > 0, x, -x) + 1.5)
    assert torch.equal(both, ((x > 0) & ~(y < 1)) | ((0 < x) & (x < 1)))
    assert m.shape == (2, 1) and m[1].isnan() and m[0] == 1.0  # max propagates NaN, as torch.amax
    assert same(xt, x.T)
    assert torch.equal(n, y.sum(0).float() + 4)
    assert torch.allclose(h, torch.maximum(x, torch.tensor(1.0)) - 1, equal_nan=True)
    assert ys.dtype == torch.float32  # a Python float against an int32 tensor: torch's default dtype
    assert x[1, 0].isnan()  # `v += s` did not touch the input


def test_reductions_take_babytriton_options():
    ops = oracle.OPS
    x = torch.arange(24.0).reshape(2, 3, 4)
    assert ops["sum"](x, axis=(0, 2), keepdims=True).shape == (1, 3, 1)
    assert ops["prod"](x[:, :1, :2] + 1, axis=(0, 2)).item() == 1 * 2 * 13 * 14
    assert ops["std"](x, dim=-1).allclose(x.std(-1, correction=0))
    assert ops["argmax"](torch.tensor([True, False, True]), axis=0).item() == 0  # bools as 0 and 1
    assert ops["sum"](torch.ones(3, dtype=torch.int8)).dtype == torch.int64
    assert ops["abs"](-2) == 2 and isinstance(ops["abs"](-2), int)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([0.5, -1.0, 2.0, math.nan, math.inf, -0.0]), min_size=1, max_size=6),
       st.floats(-2, 2))
def test_element_wise_ops_are_torchs(values, s):
    x = torch.tensor(values)
    ops = oracle.OPS
    assert same(ops["maximum"](x, s), torch.maximum(x, torch.tensor(s)))
    assert torch.allclose(ops["relu"](x), torch.relu(x), equal_nan=True)
    assert torch.allclose(ops["clip"](x, -1, 1), x.clamp(-1, 1), equal_nan=True)
    assert torch.allclose(ops["where"](x > 0, x, s), torch.where(x > 0, x, torch.tensor(s)), equal_nan=True)
