"""Features written apart, used together: control flow with library calls, inlining and device blocks."""
import torch

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}


@bt.jit
def clipped(x):
    if x.sum() > 0:
        y = sigmoid(x)  # noqa: F821 - a Relax op
    else:
        y = -x
    return y


def caller(x, n: int):
    for _ in range(n):
        x = clipped(x) * 2.0
    return x


def reference(x, n):
    for _ in range(n):
        x = (torch.sigmoid(x) if x.sum() > 0 else -x) * 2.0
    return x


def test_inlined_callee_with_an_if_inside_a_runtime_loop():
    f = bt.jit(caller)
    for n in (0, 1, 5, 30):
        x = torch.randn(4, 3)
        torch.testing.assert_close(f(x, n), reference(x, n))
    assert f.cache_info()["compilations"] == 1


def long_loop(x: bt.Tensor((3,), "float32")):
    for i in range(40):
        x = tanh(x) + i * 0.01  # noqa: F821
    return x


def test_recursive_loop_of_library_ops_matches_unrolled():
    x = torch.randn(3)
    expected = x.clone()
    for i in range(40):
        expected = torch.tanh(expected) + i * 0.01
    recursive = bt.jit(long_loop)
    unrolled = bt.jit(long_loop, unroll=64)
    torch.testing.assert_close(recursive(x), expected)
    torch.testing.assert_close(unrolled(x), expected)
    assert "R.If" not in unrolled.compile(x).stages["relax"]


def device_return(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
    with bt.device("cpu"):
        s = a + b
        if s.sum() > 0:
            return s * 2.0
    with bt.device("gpu"):
        out = s - a
    return out


def test_return_inside_a_device_block_builds():
    k = bt.jit(device_return, target=SM90).compile()
    assert "R.to_vdevice" in k.stages["RealizeVDevice"] or "to_vdevice" in k.stages["relax"]
    assert "__global__" in k.source and "define" in k.source


def index_mix(x, h):
    acc = x * 0
    for i in range(20):
        acc = acc + x * i + (i // 3) * 2
        h = h + i * 0.5
    return acc, h


def test_recursive_loop_index_promotes_like_a_python_int():
    x = torch.tensor(3, dtype=torch.int16)
    h = torch.ones(4, dtype=torch.float16)
    expected = index_mix(x, h)
    for unroll in (0, 32):  # recursive, then unrolled: same dtypes and values as Python's ints
        acc, hh = bt.jit(index_mix, unroll=unroll)(x, h)
        assert acc.dtype == torch.int16 and hh.dtype == torch.float16
        torch.testing.assert_close(acc, expected[0])
        torch.testing.assert_close(hh, expected[1])
