"""The Triton-Puzzles (puzzles.py) against their torch specs, at the repository's sizes and block sizes and
at ragged ones: interpreted, compiled for the CPU, their CUDA code generated for sm_90 and compiled by
nvcc, and on a GPU."""
from __future__ import annotations

import shutil

import pytest
import torch

import puzzles as P
from test_compiler import cuda_codegen, nvcc_ptx  # noqa: F401 - cuda_codegen: a fixture used below

from babytriton.core.errors import CompilationError

CASES = [(name, i) for name, puzzle in P.PUZZLES.items() for i in range(1 + len(puzzle.ragged))]
IDS = [f"{name}-{'puzzle' if i == 0 else f'ragged{i}'}" for name, i in CASES]


def _case(name: str, i: int) -> tuple:
    """The puzzle, its sizes and block sizes, and its inputs (the repository's for its own test; every
    int32 bit pattern at ragged sizes)."""
    puzzle = P.PUZZLES[name]
    nelem, blocks = P.sizes(puzzle, None if i == 0 else puzzle.ragged[i - 1])
    return puzzle, nelem, blocks, P.inputs(puzzle, nelem, seed=i, full_range=i > 0)


def _check(got: torch.Tensor, puzzle, args: list, tol: float = 1e-5) -> None:
    want = puzzle.spec(*args[:-1]).float()
    scale = 1.0 + want.abs().max().item()   # sums of products round in their own order
    torch.testing.assert_close(got, want, atol=tol * scale, rtol=10 * tol)


@pytest.mark.parametrize("name, i", CASES, ids=IDS)
def test_puzzle_interpreted(name, i, monkeypatch):
    monkeypatch.setenv("BABYTRITON_INTERPRET", "1")
    puzzle, nelem, blocks, args = _case(name, i)
    _check(P.run(puzzle, [a.clone() for a in args], nelem, blocks), puzzle, args)


@pytest.mark.parametrize("name, i", CASES, ids=IDS)
def test_puzzle_compiled_for_the_cpu(name, i):
    puzzle, nelem, blocks, args = _case(name, i)
    _check(P.run(puzzle, [a.clone() for a in args], nelem, blocks), puzzle, args)


@pytest.mark.parametrize("name", list(P.PUZZLES))
def test_puzzle_cuda_code_is_generated(name, cuda_codegen, monkeypatch):  # noqa: F811 - the fixture
    puzzle, nelem, blocks, args = _case(name, 0)
    for attribute in ("cache", "launchers"):   # compiled anew under the fixture, not launched from the CPU's
        monkeypatch.setattr(puzzle.kernel, attribute, {})
    P.run(puzzle, args, nelem, blocks)
    (kernel,) = cuda_codegen
    assert "blockIdx.x" in kernel.stages["schedule"] and "__global__" in kernel.stages["source"]
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(kernel.stages["source"])


def test_flash_attention_at_the_original_block_size_is_refused_as_triton_refuses_it():
    """The original notebook tests puzzle 9 with B0 = 200; tl.arange(0, 200) is no power of two."""
    puzzle, nelem, _, args = _case("simple_flash_attention", 0)
    with pytest.raises(CompilationError, match="powers of two") as info:
        P.run(puzzle, args, nelem, {"B0": 200})
    assert info.value.filename.endswith("puzzles.py")


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_long_softmax_special_values(interpret, monkeypatch):
    """inf, an all -inf row and a NaN flow as in the spec (a row of -inf is NaN: max - max)."""
    monkeypatch.setenv("BABYTRITON_INTERPRET", interpret)
    puzzle, nelem, blocks, args = _case("long_softmax", 0)
    x = args[0]
    x[0, 3] = float("inf")
    x[1, :] = float("-inf")
    x[2, 150] = float("nan")
    x[3, :100] = float("-inf")
    want = puzzle.spec(x)
    torch.testing.assert_close(P.run(puzzle, [a.clone() for a in args], nelem, blocks), want, equal_nan=True)


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_relu_backward_is_zero_where_the_product_is_zero(interpret, monkeypatch):
    """relu'(0) is 0 in torch: a zero in x or in y gives dx = 0 there, not dz * y."""
    monkeypatch.setenv("BABYTRITON_INTERPRET", interpret)
    puzzle, nelem, blocks, args = _case("fused_outer_multiplication_backwards", 1)
    args[0][::3, ::2] = 0.0
    args[1][::4] = 0.0
    got = P.run(puzzle, [a.clone() for a in args], nelem, blocks)
    assert torch.equal(got, puzzle.spec(*args[:-1]))


@pytest.mark.gpu
@pytest.mark.parametrize("name, i", CASES, ids=IDS)
def test_puzzle_on_the_gpu(name, i):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    puzzle, nelem, blocks, args = _case(name, i)
    # a GPU's fp32 tl.dot may round its operands to tf32, as Triton's does by default
    _check(P.run(puzzle, [a.clone() for a in args], nelem, blocks, device="cuda"), puzzle, args, tol=2e-3)
