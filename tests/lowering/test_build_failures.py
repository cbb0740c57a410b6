"""No valid program fails to build (issue 28): the fuzzer also builds every program for CUDA (sm_90, its
source compiled by nvcc where installed; tests/testing/fuzz_regressions/cuda_*.py are the programs it found), and a
kernel that still cannot be built is a CompilationError at the user's expression it computes, naming it."""
import inspect
import math
import re
import shutil

import pytest
import torch
import tvm
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from tvm import s_tir

import babytriton as bt
from babytriton.lowering import pipeline
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


def test_a_kernel_failing_in_babytritons_own_tir_passes_is_the_one_named(monkeypatch):
    """The locator builds each kernel with the TIR pipeline every build uses (pipeline.TIR_PIPELINE): a
    kernel that fails only in a pass of that pipeline is named, not left unlocated (TVM's default
    pipeline builds it)."""
    gate = next(k for k in bt.jit(_sum_and_gate, cache=False, target=SM90).compile(*ARGS).fusion
                if k.rule == "Elementwise")
    spell = pipeline.half_specials_from_float32

    def failing_on_the_gate(func):
        if gate.name in str(func.attrs["global_symbol"]):
            raise RuntimeError("a device pass of babytriton's TIR pipeline failed")
        return spell(func)
    monkeypatch.setattr(pipeline, "half_specials_from_float32", failing_on_the_gate)
    with pytest.raises(bt.CompilationError) as raised:
        bt.jit(_sum_and_gate, cache=False, target=SM90).compile(*ARGS)
    assert f"could not build kernel `{gate.name}`" in str(raised.value), str(raised.value)


def test_the_fuzzers_cuda_check_reports_what_does_not_build(monkeypatch):
    jitted = bt.jit(_sum_and_gate, cache=False)
    assert fuzz.check_cuda(jitted, ARGS).kind == "ok"
    monkeypatch.setattr(elementwise.Elementwise, "apply", _unbound)
    outcome = fuzz.check_cuda(jitted, ARGS)
    assert outcome.kind == "cuda-build" and "could not build kernel" in outcome.detail
    assert "CUDA = True" in fuzz.reproducer("# a program\n", outcome)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_fuzzers_cuda_check_compiles_the_source_with_nvcc(monkeypatch):
    from babytriton.runtime import kernel as runtime
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


def _non_finite_constants(x):
    """±inf and NaN as constants of x's dtype: a clamp's bounds, a compare, a fill."""
    bounded = torch.clamp(x, min=-float("inf"), max=float("inf")) + 1
    return torch.where(x == float("inf"), torch.full_like(x, float("nan")), bounded)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_infinities_and_nan_constants_build_for_cuda(dtype):
    """TVM's CUDA code generator printed a bfloat16 ±inf or NaN constant as `__float2bfloat16_rn(inff)`
    (`nanf`), which nvcc refuses (fuzz seed 100000422: nan_to_num of a bfloat16 tensor): each is
    float32's CUDART_INF_F / CUDART_NAN_F converted (pipeline.half_specials_from_float32)."""
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.5, -0.0, 0.25, -3.0, 1e4], dtype=dtype)
    torch.testing.assert_close(bt.jit(_non_finite_constants, cache=False)(x), _non_finite_constants(x),
                               equal_nan=True)
    source = bt.jit(_non_finite_constants, cache=False, target=SM90).compile(x).source
    assert "CUDART_INF_F" in source and "CUDART_NAN_F" in source  # the constants are in the kernel
    assert not re.search(r"\b(inf|nan)f\b", source), source
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def _gelu_and_its_backward(x, g):
    """Two results reading `x` through calls (GELU's forward and backward, as transformer_block's
    backward fuses them): one kernel of two blocks, staged through registers."""
    return x * torch.erf(x), g * torch.exp(x * x)


def _several_results_through_registers(shape):
    """The kernel of `_gelu_and_its_backward` for sm_90: its Elementwise rule, its CUDA's register
    arrays (name, elements), and the CUDA source."""
    args = (torch.randn(shape), torch.randn(shape))
    k = bt.jit(_gelu_and_its_backward, cache=False, target=SM90).compile(*args)
    body = k.source.split('extern "C" __global__')[-1]
    return [kernel.rule for kernel in k.fusion], re.findall(r"float (\w+)\[(\d+)\];", body), k.source


@pytest.mark.parametrize("shape", [(2, 8, 256), (3, 5, 7, 64)])
def test_several_results_of_a_rank_3_or_4_input_build_for_cuda(shape):
    """The two blocks' vector of `x` was one register copy whose region TVM covered by a min..max of
    two forms of the same flattened index: a vector loop of no static size, which the build refused
    ("Failed to vectorize loop", transformer_block's backward). Each row's lanes are split off before
    the loops are fused: every register array is one vector (a copy of a whole row, read through a
    symbolic index, would be a stack array)."""
    _builds_with_a_vector_of_registers(shape)


# unit axes the normalised blocks have no variable for: Fallback until one_loop compared flat indices
@example(outer=[1, 4], row=260)
@example(outer=[1, 1], row=1040)
@settings(max_examples=3, deadline=None, phases=(Phase.explicit, Phase.generate))  # failures not shrunk: minutes of CI
@given(outer=st.lists(st.integers(1, 9), min_size=2, max_size=3), row=st.sampled_from([4, 64, 260]))
def test_several_results_of_generated_shapes_build_for_cuda(outer, row):
    _builds_with_a_vector_of_registers((*outer, row))


def _builds_with_a_vector_of_registers(shape):
    rules, arrays, source = _several_results_through_registers(shape)
    if math.prod(shape) >= 4 * 256:  # a vector per thread: the registers hold it, no more
        assert rules == ["Elementwise"]
        assert arrays and all(int(n) == 4 for _, n in arrays), arrays
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_several_results_of_a_rank_3_input_match_torch_on_a_gpu():
    x, g = torch.randn(2, 8, 256, device="cuda"), torch.randn(2, 8, 256, device="cuda")
    for got, want in zip(bt.jit(_gelu_and_its_backward, target="gpu")(x, g), _gelu_and_its_backward(x, g)):
        torch.testing.assert_close(got, want)


def test_a_register_copy_of_no_static_size_is_made_once_per_block(monkeypatch):
    """The safety net behind the split: where TVM still sizes a copy that serves two blocks by a
    min..max (here the lanes split off the flattened loop, as they were), the copy is made once per
    block instead of failing the build (elementwise.UnsizedCopy, `_STAGINGS`)."""
    one_loop = elementwise.one_loop

    def lanes_after_fusing(sch, blocks, lanes=1, kept=False):
        fused = one_loop(sch, blocks, kept=kept)
        return fused if fused is None or lanes == 1 else sch.split(fused, [None, lanes])[0]
    monkeypatch.setattr(elementwise, "one_loop", lanes_after_fusing)
    tried = []
    several = elementwise.Elementwise._several_outputs
    monkeypatch.setattr(elementwise.Elementwise, "_several_outputs",
                        lambda self, *a: tried.append(a[4:]) or several(self, *a))
    rules, arrays, _ = _several_results_through_registers((2, 8, 256))
    assert rules == ["Elementwise"] and tried == [(True, True), (True, False)]
    assert sorted(name for name, _ in arrays) == ["g_local_ptr", "x_local_ptr", "x_local_ptr_1"]
