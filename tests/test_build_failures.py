"""No valid program fails to build (issue 28): the fuzzer also builds every program for CUDA (sm_90, its
source compiled by nvcc where installed; tests/fuzz_regressions/cuda_*.py are the programs it found), and a
kernel that still cannot be built is a CompilationError at the user's expression it computes, naming it."""
import inspect
import re
import shutil

import pytest
import torch
from tvm import s_tir

import babytriton as bt
from babytriton.schedules import elementwise
from babytriton.testing import fuzz

SM90 = fuzz.SM90


def _sum_and_gate(x, w):
    total = x.sum()
    gated = torch.erf(x) * w + 1
    return total, gated


def _unbound(self, func, target, tunable):
    """A GPU rule gone wrong: the kernel left without threads, which TVM's build refuses."""
    return s_tir.Schedule(func)


ARGS = (torch.randn(64, 256), torch.randn(256))


def test_a_kernel_that_cannot_be_built_is_reported_at_its_expression(monkeypatch):
    gate = next(k for k in bt.jit(_sum_and_gate, cache=False, target=SM90).compile(*ARGS).fusion
                if k.rule == "Elementwise")
    monkeypatch.setattr(elementwise.Elementwise, "apply", _unbound)
    with pytest.raises(bt.CompilationError) as raised:
        bt.jit(_sum_and_gate, cache=False, target=SM90).compile(*ARGS)
    message = str(raised.value)
    line = inspect.getsourcelines(_sum_and_gate)[1] + 2
    assert f"{__file__}:{line}:13: error: could not build kernel `{gate.name}`" in message, message
    assert "(it computes `torch.erf(x) * w + 1`)" in message and "for the GPU" in message
    assert not re.search(r"tvm\.|TVM|Traceback|src/|Check failed", message), message


def test_the_fuzzers_cuda_check_reports_what_does_not_build(monkeypatch):
    jitted = bt.jit(_sum_and_gate, cache=False)
    assert fuzz.check_cuda(jitted, ARGS).kind == "ok"
    monkeypatch.setattr(elementwise.Elementwise, "apply", _unbound)
    outcome = fuzz.check_cuda(jitted, ARGS)
    assert outcome.kind == "cuda-build" and "could not build kernel" in outcome.detail
    assert "CUDA = True" in fuzz.reproducer("# a program\n", outcome)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_fuzzers_cuda_check_compiles_the_source_with_nvcc(monkeypatch):
    from babytriton import runtime
    monkeypatch.setattr(runtime.Kernel, "source", property(lambda self: "__global__ void k() { undeclared(); }"))
    outcome = fuzz.check_cuda(bt.jit(_sum_and_gate, cache=False), ARGS)
    assert outcome.kind == "cuda-nvcc" and "undeclared" in outcome.detail, outcome


def _nan_to_num(x):
    return torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nested_wheres_reach_tvm_as_plain_selects(dtype):
    """torch.nan_to_num is three nested `where`s: written as `0 < select(c, 1, 0)` (a CPU kernel's bool
    casts), each condition took TVM's simplifier through both sides of the select: 13 s to compile (0.2 s
    now)."""
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.5, -0.0] * 8, dtype=dtype)
    f = bt.jit(_nan_to_num, cache=False)
    assert "< T.Select(" not in f.compile(x).stages["schedule"]
    torch.testing.assert_close(f(x), _nan_to_num(x), equal_nan=True)
