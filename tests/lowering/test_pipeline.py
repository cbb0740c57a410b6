"""The pass sequence, Dlight schedules and CUDA code generation (built here with nvcc, run on a GPU)."""
import shutil

import pytest
import torch
import tvm

import babytriton as bt
from babytriton.lowering import pipeline

SM90 = {"kind": "cuda", "arch": "sm_90"}
T = bt.Tensor((64, 32), "float32")


def chain(a: T, b: T):
    c = a + b
    d = c * a - b
    return d


def test_gpu_codegen_without_a_gpu():
    k = bt.jit(target=SM90)(chain).compile()
    assert list(k.stages)[-2:] == ["schedule", "source"]
    assert "T.thread_binding" in k.stages["schedule"] and "threadIdx.x" in k.stages["schedule"]
    assert 'extern "C" __global__' in k.source
    assert "fused_add_multiply_subtract_kernel" in k.source
    assert "blockIdx.x" in k.source and "threadIdx.x" in k.source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_generated_cuda_compiles_with_nvcc():
    from tvm.support import nvcc
    k = bt.jit(target=SM90)(chain).compile()
    with tvm.target.Target(SM90):
        ptx = nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")
    assert b".entry fused_add_multiply_subtract_kernel" in ptx


def softmax_like(x: bt.Tensor((128, 256), "float32")):
    return x * 2.0 + 1.0


def test_fallback_schedule_is_the_tutorials():
    fallback = bt.jit(target=SM90, schedule="fallback")(softmax_like).compile()
    dlight = bt.jit(target=SM90)(softmax_like).compile()
    assert "threadIdx.x" in fallback.stages["schedule"]
    assert "__global__" in fallback.source and "__global__" in dlight.source


def test_gpu_alias_without_a_gpu_targets_hopper():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the target comes from it")
    k = bt.jit(target="gpu")(chain).compile()
    assert k.target.attrs["arch"] == "sm_90"


def test_cpu_source_is_llvm_ir():
    k = bt.jit(target="cpu")(chain).compile()
    assert "T.prim_func" in k.stages["schedule"]
    assert k.source.startswith("; ModuleID")
    assert "fused_add_multiply_subtract" in k.source


def test_passes_are_one_visible_sequence():
    assert [name for name, _ in pipeline.passes()] == [
        "ConvertToDataflow", "DecomposeSoftmax", "LegalizeOps", "AnnotateTIROpPattern", "FuseRowwise", "FuseOps",
        "FuseMultiOutput", "FuseTIR"]


@pytest.mark.gpu
def test_runs_on_the_gpu():
    f = bt.jit(target="gpu")(chain)
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(64, 32, device="cuda")
    out = f(a, b)
    assert out.is_cuda
    torch.testing.assert_close(out, (a + b) * a - b)
    k = f.compile(a, b)
    assert "__global__" in k.source
    with pytest.raises(TypeError, match="parameter 'a' is on cpu"):
        f(a.cpu(), b.cpu())


@pytest.mark.gpu
def test_gpu_symbolic_shapes_dtypes_and_fallback():
    @bt.jit(target="gpu")
    def g(x: bt.Tensor(("n", 8), "float16"), y: bt.Tensor(("n", 8), "float16"), s: float):
        return (x * y + s) > 0.5, x - y

    for n in (1, 33, 1000):
        x = torch.randn(n, 8, device="cuda", dtype=torch.float16)
        y = torch.randn(n, 8, device="cuda", dtype=torch.float16)
        mask, diff = g(x, y, 0.25)
        value = x.float() * y.float() + 0.25
        # the fused kernel may round x * y + s once (fma) where torch rounds twice: skip borderline elements
        clear = (value - 0.5).abs() > 1e-2
        assert torch.equal(mask[clear], (value > 0.5)[clear])
        torch.testing.assert_close(diff, x - y)
    assert g.cache_info()["compilations"] == 1
    fb = bt.jit(target="gpu", schedule="fallback")(chain)
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(64, 32, device="cuda")
    torch.testing.assert_close(fb(a, b), (a + b) * a - b)


def loop_then_broadcast(x0: bt.Tensor((4,), "float32"), x1: bt.Tensor(("d0",), "float64")):
    v0 = x1
    c = zeros((), "int64")  # noqa: F821 - Relax op
    while c < 1:
        v0 = v0 - 1.0
        c = c + 1
    v1 = x0 * v0  # d0 against 4: a match_cast of the loop's result
    v0 *= 2
    return v0, v1


@pytest.mark.parametrize("target", ["cpu", SM90])
def test_match_cast_of_a_loop_result_beside_a_kernel(target):
    # fuzz seed 7010021221: FuseOps made the kernel of `v0 * 2` return its own input (the tuple
    # item the match_cast reads too), and FuseTIR failed
    x0, x1 = torch.randn(4), torch.randn(4, dtype=torch.float64)
    f = bt.jit(target=target)(loop_then_broadcast)
    if target != "cpu":
        assert "__global__" in f.compile(x0, x1).source
        return
    v0, v1 = f(x0, x1)
    torch.testing.assert_close(v0, (x1 - 1.0) * 2)
    torch.testing.assert_close(v1, x0 * (x1 - 1.0))
