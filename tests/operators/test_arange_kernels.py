"""torch.arange with constant bounds is a kernel of its index, fused into its consumers (legalize._arange),
not a constant tensor that each consumer reads from memory: TVM's own legalization folds it into one,
which label smoothing's one-hot compare read at 8 bytes of int64 a logit, and whose width set the row
kernel's vectors. Here: results against torch on the CPU (any bounds, step and dtype, in a fused chain),
and the CUDA for sm_90 (no int64 buffer of the row's width among the kernel's parameters, float4 loads)."""
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc") is not None


def smoothed(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def positions(x, slopes):
    t = x.shape[-1]
    pos = torch.arange(t, device=x.device)
    return x + slopes[:, None, None] * (pos[None, :] - pos[:, None])


def ranged(x):
    return x * torch.arange(3, 3 + 2 * x.shape[-1], 2) + torch.arange(x.shape[-1], dtype=torch.float32)


@pytest.mark.parametrize("rows, classes", [(16, 1000), (3, 7), (1, 1)])
def test_label_smoothing_matches_torch(rows, classes):
    logits = torch.randn(rows, classes)
    target = torch.randint(0, classes, (rows,))
    torch.testing.assert_close(bt.jit(smoothed)(logits, target), smoothed(logits, target), rtol=1e-5, atol=1e-5)


@settings(max_examples=8, deadline=None)
@given(heads=st.integers(1, 4), t=st.integers(1, 40))
def test_relative_positions_match_torch(heads, t):
    x, slopes = torch.randn(heads, t, t), torch.rand(heads)
    torch.testing.assert_close(bt.jit(positions)(x, slopes), positions(x, slopes))


@pytest.mark.parametrize("shape", [(2, 5), (4, 1), (3, 0), (130,)])
def test_stepped_and_float_ranges_match_torch(shape):
    x = torch.randn(shape)
    torch.testing.assert_close(bt.jit(ranged)(x), ranged(x))


def test_label_smoothing_reads_no_index_constant_on_the_gpu():
    """Rows of 32000 logits: the row kernel's parameters are the logits, the targets and the ignore
    mask (no (32000,) int64 buffer), and it loads the logits as float4 (they were float2, set by the
    int64 constant's width); nvcc takes it."""
    k = bt.jit(target=SM90)(smoothed).compile(torch.empty(2048, 32000, device="meta"),
                                              torch.empty(2048, dtype=torch.int64, device="meta"))
    (kernel,) = [kernel for kernel in k.fusion if any(op.op == "nn.log_softmax" for op in kernel.ops)]
    name = kernel.cuda_kernels[0]
    signature = re.search(rf"void __launch_bounds__\(\d+\) {name}\(([^)]*)\)", k.source).group(1)
    assert signature.count("int64_t*") == 1, signature   # the targets alone
    text = k.source[k.source.index(signature):]
    assert "*(float4*)(logits_ptr" in text and "float2" not in text.split("\n}\n")[0], text[:3000]
    if NVCC:
        from tvm.support import nvcc
        import tvm
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


@pytest.mark.gpu
@pytest.mark.parametrize("rows, classes", [(2048, 32000), (64, 1000)])
def test_gpu_label_smoothing_matches_torch(rows, classes):
    logits = torch.randn(rows, classes, device="cuda")
    target = torch.randint(0, classes, (rows,), device="cuda")
    torch.testing.assert_close(bt.jit(smoothed, target="gpu")(logits, target), smoothed(logits, target),
                               rtol=1e-4, atol=1e-4)
    x, slopes = torch.randn(16, 1024, 1024, device="cuda"), torch.rand(16, device="cuda")
    torch.testing.assert_close(bt.jit(positions, target="gpu")(x, slopes), positions(x, slopes))
