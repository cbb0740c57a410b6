"""Element-wise kernels with several results and intermediates the inliner kept (issue 28, p52 of the
performance fuzzer: a chain too deep to inline whole, its result and the result's square; 7 scalar CUDA
kernels on dlight's Fallback, 0.17x torch.compile on an H200). Elementwise runs every block in one
loop, each kept intermediate in each thread's registers, every result stored as one 16-byte vector.
Results against torch on the CPU (NaN, infinities, half dtypes, odd sizes); the CUDA for sm_90 read
and compiled by nvcc; the same programs against torch on a GPU (`gpu`)."""
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
import tvm

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
VECTOR_TYPE = {"float32": "float4", "float16": "uint4", "bfloat16": "uint4"}  # 16 bytes of the result


def deep(x, y):
    """NaN-aware maximum and minimum name their operands several times, and mish and leaky_relu read
    theirs twice: inlined whole this is over the inliner's bound, so it keeps intermediates."""
    h = F.hardswish(x)
    h = F.silu(h)
    h = torch.rsqrt(h * h + 1.0)
    h = torch.maximum(h, y)
    h = F.leaky_relu(h, 0.1)
    h = torch.minimum(h, y + 1.0)
    return F.mish(h)


def two_results(x, y):
    """p52's kernel: the second result reads the first."""
    h = deep(x, y)
    return h, h * h


def three_results(x, y):
    """Two results read the first, one of them with both inputs again."""
    h = deep(x, y)
    return h, h * h, torch.clamp(torch.maximum(h, y) - x, -4.0, 4.0)


def values(n: int, dtype: str, seed: int, device: str = "cpu") -> torch.Tensor:
    """Random values with a NaN, +inf and -inf among them."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3
    x[n // 3], x[n // 2], x[-1] = float("nan"), float("inf"), -float("inf")
    return x.to(DTYPES[dtype]).to(device)


def assert_close(got, expected) -> None:
    if expected.dtype == torch.float32:
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4, equal_nan=True)
    else:  # a fused kernel keeps half values in float32 between steps, as torch.compile does
        torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=3e-2, equal_nan=True)


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def kernel_params(source: str) -> list:
    """The pointer parameters of the one CUDA kernel, in order."""
    (signature,) = re.findall(r'__global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\) \{', source)
    return re.findall(r"\* (\w+)", signature)


@pytest.mark.parametrize("f, dtype", [(two_results, "bfloat16"), (three_results, "float16"),
                                      (three_results, "float32")])
def test_several_results_with_kept_intermediates_are_one_vector_kernel_on_sm90(f, dtype):
    """One CUDA kernel (Elementwise, 16 bytes of every buffer a thread), an intermediate kept in
    registers, every input loaded and every result stored once as a 16-byte vector; nvcc builds it."""
    n = 1 << 16
    x, y = values(n, dtype, 0), values(n, dtype, 1)
    k = bt.jit(target=SM90)(f).compile(x, y)
    (kernel,) = k.fusion
    lanes = 16 // DTYPES[dtype].itemsize
    assert kernel.rule == "Elementwise" and kernel.launch == f"grid {n // lanes // 256} x block 256", kernel.why
    assert len(kernel.cuda_kernels) == 1, kernel.cuda_kernels
    kept = [line for line in k.stages["schedule"].splitlines() if "alloc_buffer" in line and 'scope="local"' in line
            and not re.search(r"\b[xy]_local\b", line)]
    assert kept, "no intermediate kept: the chain no longer tests what it is for"
    vector = VECTOR_TYPE[dtype]
    params = kernel_params(k.source)
    assert len(params) >= 2 + len(f(x, y))
    for param in params:
        if param.startswith(("x_", "y_", "T_")):  # the inputs and the results; constants are scalars
            assert k.source.count(f"*({vector}*)({param} + ") == 1, (param, vector)
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("n", [4099, 3 * 2048])
def test_an_odd_size_is_one_kernel_of_one_element_a_thread_on_sm90(n):
    """No whole vectors: still one kernel, one element a thread, the intermediates in registers."""
    x, y = values(n, "float16", 0), values(n, "float16", 1)
    k = bt.jit(target=SM90)(two_results).compile(x, y)
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and len(kernel.cuda_kernels) == 1, (kernel.rule, kernel.why)
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [4096 * 3, 1009])
def test_several_results_with_kept_intermediates_match_torch_on_the_cpu(dtype, n):
    x, y = values(n, dtype, n), values(n, dtype, n + 1)
    got = bt.jit(target="cpu")(three_results)(x, y)
    for g, e in zip(got, three_results(x, y)):
        assert_close(g, e)


@pytest.mark.gpu
@pytest.mark.parametrize("f", [two_results, three_results])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1 << 20, 1000003, 4099])
def test_several_results_with_kept_intermediates_match_torch_on_a_gpu(f, dtype, n):
    x, y = values(n, dtype, n, "cuda"), values(n, dtype, n + 1, "cuda")
    k = bt.jit(target="gpu")(f)
    for g, e in zip(k(x, y), f(x, y)):
        assert_close(g, e)
    assert all(kernel.rule == "Elementwise" for kernel in k.compile(x, y).fusion)
