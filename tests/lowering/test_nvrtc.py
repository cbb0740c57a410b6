"""The lighter NVRTC prologue: what it removes, when it keeps TVM's source, and its fallback."""
import importlib.util

import pytest
import torch

import babytriton as bt
from babytriton.lowering import nvrtc

SM90 = {"kind": "cuda", "arch": "sm_90"}


def kernels(a, b):
    return bt.softmax(a * 2.0, axis=-1) + b.astype(a.dtype).sum(-1, keepdims=True), a > 0


@pytest.fixture(scope="module", params=[torch.float32, torch.float16, torch.bfloat16])
def source(request):
    args = torch.randn(8, 256, dtype=request.param), torch.randn(8, 256, dtype=torch.bfloat16)
    return bt.jit(target=SM90)(kernels).compile(*args).source


def test_only_the_traits_include_goes(source):
    lighter = nvrtc.slim(source)
    assert "<cuda/std/type_traits>" in source and "<cuda/std/type_traits>" not in lighter
    assert "using cuda::std::is_same;" not in lighter
    removed = [line for line in source.splitlines() if line not in lighter.splitlines()]
    assert all("type_traits" in line or "cuda::std::" in line or line.strip() in ("namespace std {", "}")
               for line in removed), removed
    assert lighter.splitlines()[-40:] == source.splitlines()[-40:]  # the kernels are untouched
    assert "#include <cuda/std/cstdint>" in lighter  # the integer types stay


def test_a_source_that_uses_std_keeps_its_prologue(source):
    using = source + "\n__device__ bool f() { return std::is_same<int, int>::value; }\n"
    assert nvrtc.slim(using) is using


def test_a_source_without_the_prologue_is_left_alone():
    code = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.0f; }'
    assert nvrtc.slim(code) is code


def test_what_fails_slim_compiles_as_tvm_wrote_it(source, monkeypatch):
    seen = []

    def fake(code):
        seen.append(code)
        if "<cuda/std/type_traits>" not in code:
            raise RuntimeError("NVRTC compilation failed")
        return b"cubin"
    monkeypatch.setattr(nvrtc, "_tvm_compile", fake)
    assert nvrtc._compile(source) == b"cubin"
    assert seen == [nvrtc.slim(source), source]


def test_the_slim_source_is_what_gets_compiled(source, monkeypatch):
    seen = []
    monkeypatch.setattr(nvrtc, "_tvm_compile", lambda code: seen.append(code) or b"cubin")
    nvrtc._compile(source)
    assert seen == [nvrtc.slim(source)]


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="NVRTC's Python bindings are not installed")
def test_nvrtc_emits_the_same_kernels(source):
    import re

    import tvm
    from tvm.support import nvcc
    try:
        with tvm.target.Target(SM90):
            ptx = [nvcc.compile_cuda(code, target_format="ptx", compiler="nvrtc").decode()
                   for code in (source, nvrtc.slim(source))]
    except Exception as error:  # noqa: BLE001 - bindings without the NVRTC library or headers
        pytest.skip(f"NVRTC is not usable here: {str(error)[:80]}")
    entries = [re.findall(r"\.entry[\s\S]*?\n}\n", text) for text in ptx]
    assert entries[0] and entries[0] == entries[1]


# -- subnormals: --use_fast_math's flush to zero undone ---------------------------------------------

@pytest.mark.parametrize("mode", ["nvrtc", "nvcc"])
def test_both_compilers_are_asked_to_keep_subnormals(mode, monkeypatch):
    from tvm.support import nvcc
    calls = []
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", mode)
    monkeypatch.setattr(nvcc, "compile_cuda", lambda code, **kw: calls.append(kw) or b"binary")
    assert nvrtc._tvm_compile("code") == b"binary"
    assert calls == [{"target_format": "cubin" if mode == "nvrtc" else "fatbin", "compiler": mode,
                      "options": nvrtc.KEEP_SUBNORMALS}]


def test_the_flag_keeps_subnormals_in_the_kernels_instructions(source):
    """nvcc's PTX of a generated kernel: with the flag, no `.ftz` instruction (a subnormal operand or
    result is kept); without it, --use_fast_math flushes them."""
    import shutil

    import tvm
    from tvm.support import nvcc
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    with tvm.target.Target(SM90):
        kept, flushed = (nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc", options=options).decode()
                         for options in (nvrtc.KEEP_SUBNORMALS, None))
    assert ".ftz." in flushed and ".ftz." not in kept


def kl(student, teacher):
    log_p = torch.nn.functional.log_softmax(student / 2.0, dim=-1)
    q = torch.nn.functional.softmax(teacher / 2.0, dim=-1)
    return torch.nn.functional.kl_div(log_p, q, reduction="batchmean") * 4.0


@pytest.mark.gpu
def test_gpu_kl_divergence_over_subnormal_probabilities_agrees_with_torch():
    """Teacher logits 60 apart make softmax probabilities below 1.2e-38: flushed to 0, q * log(q) was
    0 * -inf = NaN where torch's sum is finite."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    torch.manual_seed(0)
    s, t = torch.randn(64, 4096, device="cuda"), torch.randn(64, 4096, device="cuda") * 60.0
    q = torch.softmax(t / 2.0, dim=-1)
    assert ((q > 0) & (q < torch.finfo(torch.float32).tiny)).any()  # the inputs do reach subnormals
    got, want = bt.jit(target="gpu")(kl)(s, t), kl(s, t)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
