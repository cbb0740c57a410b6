"""A CUDA kernel that reads back what it wrote gets no `__restrict__` pointers.

A multi-output kernel's later results read its earlier ones from memory (`y = 2x + 1; m = y > 0;
where(m, 5.0, y)` writes y, then reads y[i]). With every pointer `__restrict__` (TVM marks each kernel
noalias), nvcc merged the read of y[i] and the read of the constant into one load through the
read-only cache (`ld.global.nc`), which misses the kernel's own store: on an H200 the `where` came out
0 wherever it took y, and topk/sort of computed values picked wrong indices (issue 27's
topk_router_sigmoid). pipeline.unrestricted_if_read_back drops `__restrict__` from such kernels.

Built for sm_90 and compiled to PTX by nvcc (where installed); results compared with torch on the CPU
here and on the GPU under `-m gpu`.
"""
import re
import shutil

import pytest
import torch
import tvm

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\) \{')


def three(x):
    y = 2 * x + 1
    m = y > 0
    return y, m, torch.where(m, 5.0, y)


def nan_to_inf(x):
    y = 2 * x + 1
    return y, torch.where(torch.isnan(y), float("inf"), y)


def computed_topk(x):
    return (2 * x + 1).topk(2, dim=-1)


def plain(x):
    return x * 2 + 1, x.exp()


def kernels(source: str) -> dict[str, str]:
    """Each kernel's name and parameter list."""
    return {m.group(1): m.group(2) for m in KERNEL.finditer(source)}


def ptx(source: str) -> str:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc").decode()


@pytest.mark.parametrize("f", [three, nan_to_inf, computed_topk])
def test_a_kernel_reading_its_own_results_has_no_restrict(f):
    k = bt.jit(f, target=SM90).compile(torch.randn(16, 8))
    read_back = {name: params for name, params in kernels(k.source).items() if "where" in name}
    assert read_back, k.fusion
    assert all("__restrict__" not in params for params in read_back.values()), read_back
    if shutil.which("nvcc"):  # no read of the kernel through the read-only cache
        entries = ptx(k.source).split(".entry ")[1:]
        assert all("ld.global.nc" not in entry for entry in entries if entry.startswith(tuple(read_back)))


def test_kernels_that_only_read_inputs_keep_restrict():
    k = bt.jit(plain, target=SM90).compile(torch.randn(16, 8))
    assert all("__restrict__" in params for params in kernels(k.source).values()), k.source


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("f", [three, nan_to_inf, computed_topk])
@pytest.mark.parametrize("shape", [(16, 8), (1024, 1024)])
def test_results_match_torch(f, shape, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device)
    x[0, 1] = float("nan")  # one per row: torch's topk orders equal values (NaNs) as it likes
    got = bt.jit(f, target="gpu" if device == "cuda" else "cpu")(x)
    for g, w in zip(got, f(x)):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
