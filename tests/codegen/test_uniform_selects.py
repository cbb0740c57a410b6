"""A vectorised select whose condition is one bool for every lane of the vector builds for CUDA.

Writing a slice of a parameter in place (`cache[:, start:start + s] = new`) is a `where` on a mask
along an outer axis; `torch.where` on a row mask or on a scalar, `masked_fill` with a row mask are
the same shape of kernel. Once the Elementwise rule vectorises such a kernel, TVM's vectoriser makes
the condition a `Broadcast` of one bool, which its CUDA code generator declared with the select's
own type (`float4 c = make_ushort4(...)`): NVRTC refused it ("during build after schedule" on the
GPU). pipeline.TIR_PIPELINE branches on that bool instead (`branch_on_uniform_selects`).

Each kernel here is built for sm_90 and its CUDA compiled by nvcc (where installed), and run on the
CPU against torch.
"""
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import tvm
import tvm_ffi
from hypothesis import given, settings, strategies as st
from tvm.script import tirx as T

import babytriton as bt
from babytriton.lowering import pipeline

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: torch_corpus.py
from torch_corpus import CORPUS  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}
# TVM's wrong declaration: a vector of bools (ushort4) declared with the type of the select's values
MISTYPED = re.compile(r"\b(?:float|half|nv_bfloat16|double|int|uint|longlong)\d+ \w+ = make_ushort\d+\(")


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def assert_builds_for_cuda(k) -> None:
    """The kernels' CUDA declares no bool vector with another type, and nvcc compiles it."""
    assert not MISTYPED.search(k.source), MISTYPED.search(k.source).group(0)
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


def assert_vectorised(k) -> None:
    """At least one kernel is the Elementwise rule's vectorised loop (else nothing here is tested)."""
    assert "T.vectorized" in k.stages["schedule"], k.fusion


# ------------------------------------------------------------------------------------------------
# the pass itself
# ------------------------------------------------------------------------------------------------

def _row_select(target: dict) -> tvm.tirx.PrimFunc:
    @T.prim_func(s_tir=True)
    def main(mask: T.Buffer((8,), "int32"), a: T.Buffer((32,), "float32"), b: T.Buffer((32,), "float32"),
             out: T.Buffer((32,), "float32")):
        for i in range(8):
            out[T.Ramp(i * 4, 1, 4)] = T.Select(T.Broadcast(mask[i] != 0, 4), a[T.Ramp(i * 4, 1, 4)],
                                                b[T.Ramp(i * 4, 1, 4)])
    return main.with_attr("target", tvm.target.Target(target))


def _selects(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, (tvm.tirx.Select, found.append))
    return found


def test_cuda_select_on_one_bool_becomes_a_branch():
    func = pipeline.branch_on_uniform_selects(_row_select(SM90))
    assert not _selects(func)
    assert "T.if_then_else(mask[i] != 0" in func.script()


def test_cpu_select_on_one_bool_is_left_as_it_is():
    func = _row_select({"kind": "llvm"})
    assert pipeline.branch_on_uniform_selects(func).same_as(func)


# ------------------------------------------------------------------------------------------------
# programs
# ------------------------------------------------------------------------------------------------

def test_kv_cache_decode_builds_for_cuda():
    """The corpus case that failed on the H200: the decode step writes the caller's caches."""
    case = next(c for c in CORPUS if c.name == "attention_kv_cache_decode")
    k = bt.jit(case.fn, target=SM90).compile(*case.make_inputs("cpu"))
    assert_vectorised(k)
    assert_builds_for_cuda(k)


def masks_and_scalars(x, y, row, s):
    """`where` and `masked_fill` whose condition is the same along the vectorised innermost axis."""
    by_row = torch.where(row[:, None] > 0, x, y)
    by_scalar = torch.where(s > 0, x, y)
    filled = x.masked_fill(row[:, None] != 0, 0.0)
    return by_row, by_scalar, filled


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_and_scalar_conditions(dtype):
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(64, 96, generator=g).to(dtype) for _ in range(2))
    x[3, 5] = float("nan")
    row = torch.randn(64, generator=g).to(dtype)
    s = torch.tensor(-0.5, dtype=dtype)
    k = bt.jit(masks_and_scalars, target=SM90).compile(x, y, row, s)
    assert_vectorised(k)
    assert_builds_for_cuda(k)
    for got, want in zip(bt.jit(masks_and_scalars)(x, y, row, s), masks_and_scalars(x, y, row, s)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def write_rows(cache, new, start: int):
    """A decode step's write: rows `start:start + s` of the first `b` batch entries, in place."""
    b, s = new.shape[0], new.shape[1]
    cache[:b, start:start + s] = new
    return cache.float().sum(dim=1)


_CPU_WRITE_ROWS = bt.jit(write_rows)


@settings(max_examples=3, deadline=None)
@given(batch=st.integers(1, 3), extra=st.integers(0, 1), length=st.integers(2, 48), heads=st.sampled_from([1, 4, 8]),
       dim=st.sampled_from([1, 3, 16, 64]), rows=st.integers(1, 3),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), data=st.data())
def test_slice_written_in_place(batch, extra, length, heads, dim, rows, dtype, data):
    """Generated caches and writes (vectorised where a row is whole vectors and the cache fills a
    block): built for sm_90 (nvcc), and on the CPU the result and the caller's cache are torch's."""
    rows = min(rows, length)
    start = data.draw(st.integers(0, length - rows), label="start")
    g = torch.Generator().manual_seed(length * 131 + dim)
    cache = torch.randn(batch + extra, length, heads, dim, generator=g).to(dtype)
    new = torch.randn(batch, rows, heads, dim, generator=g).to(dtype)
    assert_builds_for_cuda(bt.jit(write_rows, target=SM90).compile(cache, new, start))
    mine, theirs = cache.clone(), cache.clone()
    got = _CPU_WRITE_ROWS(mine, new, start)
    want = write_rows(theirs, new, start)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    torch.testing.assert_close(got, want)
