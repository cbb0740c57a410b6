"""One parameter per tensor (babytriton/passes/operands.py): a kernel given the same tensor several
times, as the views that RepeatViews repeats for each reader, takes it once."""
import torch

import babytriton as bt


def group_norm(x):
    g = x.reshape(x.shape[0], 2, -1)
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) ** 2).mean(-1, keepdim=True)
    return ((g - mean) / torch.sqrt(var + 1e-5)).reshape(x.shape)


def centred_rows(x):
    rows = x.reshape(x.shape[0], -1)
    return rows - rows.mean(-1, keepdim=True)


def kernel_params(k) -> list[int]:
    """How many tensors each kernel of the FuseTIR stage takes (its printed signature's buffers)."""
    return [line.count("T.Buffer(") for line in str(k.stages["FuseTIR"]).splitlines()
            if line.lstrip().startswith("def ") and "T.Buffer(" in line]


def test_a_reshape_read_by_three_passes_is_one_parameter():
    x = torch.randn(2, 4, 3, 5)
    k = bt.jit(target="cpu")(group_norm).compile(x)
    assert kernel_params(k) == [2]          # the view of x once, and the result
    torch.testing.assert_close(k(x), group_norm(x), rtol=1e-5, atol=1e-5)


def test_a_reshape_read_twice_is_one_parameter():
    x = torch.randn(7, 3, 11)
    x[0, 0, 0] = float("nan")
    k = bt.jit(target="cpu")(centred_rows).compile(x)
    assert kernel_params(k) == [2]
    torch.testing.assert_close(k(x), centred_rows(x), equal_nan=True)
