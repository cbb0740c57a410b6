"""Choices between register values without branches (babytriton/lowering/register_selects.py): an
argmax's (index, value) update, which TVM's RewriteUnsafeSelect and C's `&&`/`||` made nested
branches in CUDA. Here: what is rewritten and what is not (a load from memory, an impure call), the
rewritten update of GPU schedules run on the CPU against torch (ties, NaN, -inf), and the CUDA and
PTX built for sm_90 (no GPU needed)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import tirx

import babytriton as bt
from babytriton.lowering import pipeline
from babytriton.lowering.register_selects import branchless
from babytriton.schedules.analysis import find_all

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")
IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
sys.path.insert(0, str(Path(__file__).parents[1] / "schedules"))  # test_schedules_small: GPU schedules run on the CPU
from test_schedules_small import _run_on_cpu  # noqa: E402


def _buffer(name, scope, dtype="float32"):
    return tirx.decl_buffer((4,), dtype, name, scope=scope)


def _rewritten(expr):
    return branchless(tirx.Evaluate(expr)).value


def test_only_arms_of_registers_and_pure_calls_become_selects():
    i = tirx.Var("i", "int32")
    reg, mem = _buffer("reg", "local"), _buffer("mem", "global")
    cond = tirx.BufferLoad(reg, [i]) > tirx.const(0.0, "float32")
    on_registers = tirx.if_then_else(cond, tirx.BufferLoad(reg, [i]), tirx.abs(tirx.BufferLoad(reg, [i + 1])))
    assert isinstance(_rewritten(on_registers), tirx.Select)
    for arm in (tirx.BufferLoad(mem, [i]),  # a guarded load of memory stays guarded
                tirx.call_extern("float32", "side_effect", i)):  # as does an opaque call
        kept = _rewritten(tirx.if_then_else(cond, tirx.BufferLoad(reg, [i]), arm))
        assert isinstance(kept, tvm.ir.Call) and kept.op.same_as(IF_THEN_ELSE)
    # nested: the inner branch becomes a select first, then the outer one
    nested = tirx.if_then_else(cond, on_registers, tirx.BufferLoad(reg, [i]))
    assert not find_all(_rewritten(nested), tvm.ir.Call) or all(
        not c.op.same_as(IF_THEN_ELSE) for c in find_all(_rewritten(nested), tvm.ir.Call))


def test_bool_logic_of_registers_is_bitwise_and_vectors_are_kept():
    i = tirx.Var("i", "int32")
    reg, mem = _buffer("reg", "local"), _buffer("mem", "global")
    a, b = tirx.BufferLoad(reg, [i]), tirx.BufferLoad(reg, [i + 1])
    logic = tirx.Or(tirx.And(a < b, tirx.isnan(a)), tirx.Select(a == b, i < 3, tirx.Not(b > a)))
    out = _rewritten(logic)
    assert not find_all(out, tirx.And) and not find_all(out, tirx.Or) and not find_all(out, tirx.Select), out
    guarded = tirx.And(a < b, tirx.BufferLoad(mem, [i]) > a)  # `&&` guards the load of memory
    assert isinstance(_rewritten(guarded), tirx.And)
    lanes = tirx.And(tirx.Broadcast(a < b, 4), tirx.Broadcast(i < 3, 4))
    assert isinstance(_rewritten(lanes), tirx.And)


def column_argmax(x):
    return x.argmax(0)


def column_argmin(x):
    return x.argmin(0)


def ties_nan_inf(rows, cols, dtype, seed):
    """Small integers (ties: the first index wins), NaN in some columns (the first NaN wins), ±inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (rows, cols), generator=g).to(dtype)
    for _ in range(max(1, rows * cols // 50)):
        r, c = torch.randint(rows, (1,), generator=g).item(), torch.randint(cols, (1,), generator=g).item()
        x[r, c] = float(["nan", "inf", "-inf"][torch.randint(3, (1,), generator=g).item()])
    x[:, 0] = float("-inf")  # a column of -inf only: index 0
    return x


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(2, 300), cols=st.sampled_from([1, 7, 64, 320, 1000]),
       dtype=st.sampled_from([torch.float32, torch.float16]), fn=st.sampled_from([column_argmax, column_argmin]),
       seed=st.integers(0, 99))
def test_rewritten_pair_updates_of_gpu_schedules_match_torch(rows, cols, dtype, fn, seed):
    """The sm_90 schedule's (index, value) updates rewritten as branchless does, run on the CPU with
    its thread loops serial: torch's first index of the max (min), of the first NaN."""
    x = ties_nan_inf(rows, cols, dtype, seed)
    k = bt.jit(target=SM90, cache=False)(fn).compile(x.to("meta"))
    func = next(f for _, f in tvm.script.from_source(k.stages["schedule"]).functions_items()
                if isinstance(f, tirx.PrimFunc))
    body = branchless(func.body)
    assert body.same_as(func.body) == ("x_local" not in k.stages["schedule"])  # (staged: the update reads registers)
    rewritten = SimpleNamespace(stages={"schedule": tvm.IRModule({"main": func.with_body(body)}).script()})
    want = fn(x)
    assert torch.equal(_run_on_cpu(rewritten, (x,), want), want)


def sm90_sources(fn, shape, dtype):
    """The CUDA of `fn` for sm_90, with register selects and without (SelectsOnRegisters left out)."""
    x = torch.empty(shape, dtype=dtype, device="meta")
    with_selects = bt.jit(target=SM90, cache=False)(fn).compile(x)
    kept, pipeline.selects_on_registers = pipeline.selects_on_registers, lambda func: func
    try:
        without = bt.jit(target=SM90, cache=False)(fn).compile(x)
    finally:
        pipeline.selects_on_registers = kept
    return with_selects, without


def ptx_branches(source: str) -> int:
    out = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-x", "cu", "-", "-o", "-"], input=source,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return len(re.findall(r"\bbra(\.uni)?\b", out.stdout))


def values_and_indices(x):
    return x.max(dim=-2)


@pytest.mark.parametrize("fn, shape, dtype", [
    (values_and_indices, (967, 32000), torch.float16), (values_and_indices, (138, 128, 3000), torch.bfloat16),
    (column_argmin, (4096, 1024), torch.float32), (column_argmax, (2048, 4096), torch.float16)],
    ids=lambda v: getattr(v, "__name__", str(v).replace(" ", "")))  # (no address: xdist's workers agree)
def test_pair_updates_in_cuda_are_selects_without_branches(fn, shape, dtype):
    """p46's argmax and its kin: each (index, value) update a register select of bitwise predicate
    logic (`condval` was the `if` of TVM's if_then_else); nvcc's PTX then has fewer branches (p46:
    86 where 542; 395 where 875, 77 where 597, 301 where 525) and ptxas spills nothing."""
    k, before = sm90_sources(fn, shape, dtype)
    assert all(kk.rule == "OuterReduction" for kk in k.fusion if "arg" in kk.name), k.fusion
    updates = [line for line in k.source.splitlines() if re.search(r"\bv_T_arg\w+ = ", line)]
    assert updates and "condval" in before.source and "condval" not in k.source
    assert not any("&&" in line or "||" in line for line in updates), updates[0]
    if NVCC:
        # (what branches stay: rows' guards, and the cross-thread steps on shared memory, `&&` still)
        assert ptx_branches(k.source) < 0.6 * ptx_branches(before.source)
        out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", "/dev/null"],
                             input=k.source, capture_output=True, text=True)
        assert out.returncode == 0 and "spill" in out.stderr, out.stderr[-2000:]
        assert not re.search(r"[1-9]\d* bytes spill", out.stderr), out.stderr


# -- marked gpu: against torch there ----------------------------------------------------------------
def over_outer(x):
    return x.max(dim=0), x.min(dim=0), x.argmax(0)


def over_inner(x):
    return x.max(dim=1), x.min(dim=1), x.argmax(1)


@pytest.mark.gpu
@settings(max_examples=12, deadline=None)
@given(rows=st.integers(2, 1200), cols=st.sampled_from([1, 33, 64, 1500, 4100]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), transposed=st.booleans(),
       seed=st.integers(0, 99))
def test_gpu_pairs_match_torch(rows, cols, dtype, transposed, seed):
    """Values and indices of max/min/argmax over the outer axis, contiguous and transposed (then over
    the inner one of a non-contiguous view): torch's, ties to the first index, NaN first."""
    x = ties_nan_inf(rows, cols, dtype, seed).cuda()
    x, f = (x.t(), over_inner) if transposed else (x, over_outer)
    for got, want in zip(bt.jit(target="gpu", cache=False)(f)(x), f(x)):
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
