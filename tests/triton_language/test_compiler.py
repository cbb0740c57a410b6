"""The compiler from Triton kernels to TIR (babytriton/triton/compiler): the tutorial and puzzle kernels
of kernels.py compiled for the CPU against torch and the interpreter at ragged sizes, their CUDA code
generated for sm_90 and compiled by nvcc, the stages, and the errors at the user's line."""
from __future__ import annotations

import importlib
import shutil
import textwrap

import pytest
import torch
import tvm
from hypothesis import given, settings, strategies as st

from babytriton.core.errors import CompilationError
from babytriton.triton import compiler

triton_jit = importlib.import_module("babytriton.triton.jit")   # the module (triton.jit is the decorator)

import kernels

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def _close(got, want, dtype):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-4)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        # sums of many products (dot over K) round in their own order: absolute error grows with the values
        scale = 1.0 + (w.float().abs().nan_to_num(0, 0, 0).max().item() if w.numel() else 0.0)
        torch.testing.assert_close(g.float(), w.float(), atol=tol * scale, rtol=tol, equal_nan=True)


CASES = [(name, dtype) for name, case in kernels.CASES.items() for dtype in case.dtypes]


@pytest.mark.parametrize("name, dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
def test_kernel_on_cpu_agrees_with_torch_and_the_interpreter(name, dtype, monkeypatch):
    case = kernels.CASES[name]
    gen = torch.Generator().manual_seed(1)
    args = case.make(dtype, 37, gen)   # ragged: every block size leaves a masked edge
    got = case.run(*args)
    _close(got, case.ref(*args), dtype)
    monkeypatch.setenv("BABYTRITON_INTERPRET", "1")
    interpreted = case.run(*args)
    got, interpreted = (x if isinstance(x, tuple) else (x,) for x in (got, interpreted))
    for g, i in zip(got, interpreted):
        torch.testing.assert_close(g, i, atol=1e-5 if dtype == torch.float32 else 2e-2, rtol=1e-3, equal_nan=True)


@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 4099])
def test_vector_add_at_ragged_sizes_and_on_views(n):
    gen = torch.Generator().manual_seed(n)
    base = torch.randn(2 * n + 3, generator=gen)
    x, y = base[3:3 + 2 * n:2], torch.randn(n, generator=gen)   # a strided view, a storage offset
    x = x.contiguous() if n == 1 else x
    out = kernels.add(x.contiguous(), y)
    torch.testing.assert_close(out, x + y)


def test_a_kernel_reads_a_tensor_from_its_storage_offset():
    """The pointer is the tensor's first element: a slice's data starts mid-storage."""
    x = torch.arange(10.0)[3:]
    y = torch.ones(7)
    torch.testing.assert_close(kernels.add(x, y, BLOCK_SIZE=4), x + 1)


def test_softmax_special_values():
    x = torch.randn(4, 50)
    x[0, 3] = float("inf")
    x[1, :] = float("-inf")
    x[2, 7] = float("nan")
    torch.testing.assert_close(kernels.softmax(x), torch.softmax(x, dim=1), equal_nan=True)


def test_stages_are_shown():
    kernels.add(torch.randn(100), torch.randn(100))
    (k,) = [v for v in kernels.add_kernel.cache.values() if v.device_kind == "cpu"][:1]
    assert set(k.stages) >= {"python", "block", "schedule", "source"}
    assert "triton.block" in k.stages["block"] and "T.parallel" in k.stages["schedule"]
    assert "T.vectorized" in k.stages["schedule"] and "define" in k.stages["source"]


# --- CUDA code generation (no GPU needed) ------------------------------------------------------------

@pytest.fixture
def cuda_codegen(monkeypatch):
    """Kernels launched while this is active are compiled for sm_90 and not run: their CompiledKernels."""
    built = []
    original = compiler.compile

    def compile_for_gpu(jit_fn, signature, constants, options):
        k = original(jit_fn, signature, constants, {**options, "target": SM90})
        built.append(k)
        return k
    monkeypatch.setattr(compiler, "compile", compile_for_gpu)
    monkeypatch.setattr(compiler.CompiledKernel, "launch", lambda self, grid, args: None)
    monkeypatch.setattr(compiler.CompiledKernel, "launcher", lambda self: lambda grid, args: None)
    monkeypatch.setattr(triton_jit, "launch_target", lambda runtime: "cuda-codegen")
    for obj in vars(kernels).values():   # compiled anew (and autotuned anew) under this fixture
        for holder in (obj, getattr(obj, "fn", None)):
            for attribute in ("cache", "launchers"):
                if isinstance(getattr(holder, attribute, None), dict):
                    monkeypatch.setattr(holder, attribute, {})
    return built


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with SM90:
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


@pytest.mark.parametrize("name", list(kernels.CASES))
def test_cuda_code_is_generated(name, cuda_codegen):
    case = kernels.CASES[name]
    case.run(*case.make(case.dtypes[0], 37, torch.Generator().manual_seed(0)))
    assert cuda_codegen
    for k in cuda_codegen:
        assert "blockIdx.x" in k.stages["schedule"] and "__global__" in k.stages["source"]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.parametrize("name", ["vector_add", "fused_softmax", "matmul", "layer_norm", "histogram"])
def test_nvcc_compiles_the_tutorial_kernels(name, cuda_codegen):
    case = kernels.CASES[name]
    case.run(*case.make(case.dtypes[0], 37, torch.Generator().manual_seed(0)))
    for k in cuda_codegen[:1]:
        assert b".entry" in nvcc_ptx(k.stages["source"])


def test_gpu_schedule_keeps_own_elements_in_registers_and_reduces_across_threads(cuda_codegen):
    kernels.softmax(torch.randn(3, 50))
    schedule, source = cuda_codegen[0].stages["schedule"], cuda_codegen[0].stages["source"]
    assert "load_0_own" in schedule and "alloc_shared" not in schedule   # the row: each thread's elements
    assert "__shfl_down_sync" in source and "__syncthreads" in source


def test_large_tiles_go_to_dynamic_shared_memory(cuda_codegen, monkeypatch):
    from babytriton.triton.compiler import gpu
    monkeypatch.setattr(gpu, "STATIC_SHARED", 1024)
    kernels.matmul(torch.randn(40, 40).half(), torch.randn(40, 40).half())
    assert all("extern __shared__" in k.stages["source"] for k in cuda_codegen)
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(cuda_codegen[0].stages["source"])


# --- errors at the user's line -------------------------------------------------------------------------

def _compile_error(source: str, tmp_path, *args, grid=(1,), **meta) -> CompilationError:
    path = tmp_path / "user_kernel.py"
    path.write_text(textwrap.dedent(source))
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's own kernel
    with pytest.raises(CompilationError) as info:
        namespace["kernel"][grid](*args, **meta)
    return info.value


IMPORTS = "import babytriton.triton as triton\nimport babytriton.triton.language as tl\n"
HEADER = IMPORTS + "\n\n@triton.jit\n"


@pytest.mark.parametrize("body, message, line", [
    ("    while True:\n        pass\n", "`while` loops are not supported", 7),
    ("    x = tl.load(p + tl.arange(0, 16))\n    tl.store(p + tl.arange(0, 16), x & 1.5)\n", "takes integers", 8),
    ("    tl.store(p + tl.arange(0, 16), tl.umulhi(1, 2))\n", "tl.umulhi is not supported", 7),
    ("    x = tl.arange(0, 12)\n", "powers of two", 7),
    ("    print(tl.arange(0, 16))\n", "print() of block values runs in interpret mode", 7),
    ("    tl.store(p + tl.arange(0, 16), undefined_name)\n", "'undefined_name' is not defined", 7),
    ("    y = tl.load(p + tl.arange(0, 16))\n    y[0] = 1.0\n", "assigns only to names", 8),
    ("    x = tl.dot(tl.zeros([16, 16], tl.float32), tl.zeros([8, 16], tl.float32))\n", "cannot multiply", 7),
])
def test_unsupported_programs_are_compilation_errors_at_their_line(body, message, line, tmp_path):
    error = _compile_error(HEADER + "def kernel(p):\n" + body, tmp_path, torch.zeros(16))
    assert message in error.message and error.lineno == line and error.filename.endswith("user_kernel.py")
    assert "^" in str(error)


def test_a_return_under_a_run_time_condition_is_refused(tmp_path):
    body = "    if n > 2:\n        return\n    tl.store(p + tl.arange(0, 16), 1.0)\n"
    error = _compile_error(HEADER + "def kernel(p, n):\n" + body, tmp_path, torch.zeros(16), 3)
    assert "`return` inside a run-time `if`" in error.message and error.lineno == 8


def _run_source(source: str, tmp_path, grid, *args, **meta):
    path = tmp_path / "user_kernel.py"
    path.write_text(IMPORTS + textwrap.dedent(source))
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's own kernel
    namespace["kernel"][grid](*args, **meta)


def test_constexpr_branches_early_return_and_static_range(tmp_path):
    """`if` on a constexpr picks its branch (the other need not compile), `return` ends the kernel,
    static_range unrolls, a helper with a default argument is inlined."""
    source = """
        @triton.jit
        def twice(x, factor=2):
            return x * factor

        @triton.jit
        def kernel(p, n, MODE: tl.constexpr, STEPS: tl.constexpr):
            offs = tl.arange(0, 16)
            x = tl.load(p + offs, mask=offs < n, other=0.0)
            if MODE == "double":
                for _ in tl.static_range(STEPS):
                    x = twice(x)
            else:
                x = x.this_method_does_not_exist()
            tl.store(p + offs, x, mask=offs < n)
            return
            tl.store(p + offs, x + 100.0, mask=offs < n)
    """
    p = torch.arange(16.0)
    _run_source(source, tmp_path, (1,), p, 10, MODE="double", STEPS=3)
    torch.testing.assert_close(p, torch.cat([torch.arange(10.0) * 8, torch.arange(10.0, 16.0)]))


def test_integer_division_and_shifts_are_c_like(tmp_path):
    source = """
        @triton.jit
        def kernel(a, b, q, r, s, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(a + offs)
            y = tl.load(b + offs)
            tl.store(q + offs, x // y)
            tl.store(r + offs, x % y)
            tl.store(s + offs, (x >> 1) ^ (x << 2) | (y & 6))
    """
    a = torch.tensor([7, -7, 7, -7, 100, -1, 0, 5], dtype=torch.int32)
    b = torch.tensor([2, 2, -2, -2, 7, 3, 5, -5], dtype=torch.int32)
    q, r, s = (torch.empty(8, dtype=torch.int32) for _ in range(3))
    _run_source(source, tmp_path, (1,), a, b, q, r, s, BLOCK=8)
    assert torch.equal(q, torch.div(a, b, rounding_mode="trunc").int())
    assert torch.equal(r, torch.fmod(a, b))
    assert torch.equal(s, ((a >> 1) ^ (a << 2)) | (b & 6))


def test_reductions_along_each_axis_and_kept_dims(tmp_path):
    source = """
        @triton.jit
        def kernel(x_ptr, m_ptr, i_ptr, s_ptr, BLOCK: tl.constexpr):
            r = tl.arange(0, 4)
            c = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + r[:, None] * BLOCK + c[None, :])
            m = tl.max(x, axis=1, keep_dims=True)     # (4, 1)
            tl.store(m_ptr + r[:, None] * BLOCK + c[None, :], x - m)
            tl.store(i_ptr + r, tl.argmin(x, axis=1))
            tl.store(s_ptr + c, tl.sum(x, axis=0))
    """
    x = torch.randn(4, 32)
    x[1, 5] = x[1, 9] = -10.0   # ties: the first index
    m, i, s = torch.empty(4, 32), torch.empty(4, dtype=torch.int32), torch.empty(32)
    _run_source(source, tmp_path, (1,), x, m, i, s, BLOCK=32)
    torch.testing.assert_close(m, x - x.max(1, keepdim=True).values)
    assert torch.equal(i, x.argmin(1).int())
    torch.testing.assert_close(s, x.sum(0))


def test_math_casts_hints_and_constexpr_kinds(tmp_path):
    source = """
        @triton.jit
        def kernel(x_ptr, o_ptr, n, SCALE: tl.constexpr, SHIFT: tl.constexpr, NEG: tl.constexpr,
                   BLOCK: tl.constexpr):
            offs = tl.max_contiguous(tl.multiple_of(tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), BLOCK), BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, other=1.0)
            y = tl.exp(x) + tl.log(tl.abs(x) + 1) + tl.sqrt(tl.abs(x)) * tl.rsqrt(x * x + 1) + tl.sin(x) * tl.cos(x)
            y += tl.exp2(x) - tl.log2(tl.abs(x) + 2) + tl.erf(x) + tl.sigmoid(x) + tl.floor(x) + tl.ceil(x)
            y = tl.where(x > 0, y * SCALE, -y) if NEG else y * SCALE
            y = tl.minimum(tl.maximum(y, -50.0), tl.full([BLOCK], 50.0, tl.float32)) + tl.fma(x, x, SHIFT)
            q = (x * 4).to(tl.int32)
            y = y + (q // 3).to(tl.float32) + tl.cdiv(n, BLOCK)
            tl.store(o_ptr + offs, y.to(tl.float16), mask=mask)
    """
    x = torch.randn(70)
    o = torch.empty(70, dtype=torch.float16)
    _run_source(source, tmp_path, (3,), x, o, 70, SCALE=1.5, SHIFT=2, NEG=True, BLOCK=32)
    y = (x.exp() + (x.abs() + 1).log() + x.abs().sqrt() * torch.rsqrt(x * x + 1) + x.sin() * x.cos()
         + torch.exp2(x) - torch.log2(x.abs() + 2) + torch.erf(x) + torch.sigmoid(x) + x.floor() + x.ceil())
    y = torch.where(x > 0, y * 1.5, -y).clamp(-50, 50) + x * x + 2
    y = y + torch.div((x * 4).int(), 3, rounding_mode="trunc").float() + 3
    torch.testing.assert_close(o, y.half(), atol=1e-2, rtol=1e-2)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 3000), block=st.sampled_from([16, 128, 1024]))
def test_vector_add_at_any_size(n, block):
    gen = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    torch.testing.assert_close(kernels.add(x, y, BLOCK_SIZE=block), x + y)


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 300))
def test_softmax_at_any_size(rows, cols):
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * 1000 + cols))
    torch.testing.assert_close(kernels.softmax(x), torch.softmax(x, dim=1))


def test_a_loop_carried_value_must_keep_its_type(tmp_path):
    body = ("    acc = tl.zeros([16], tl.float32)\n    for i in range(n):\n"
            "        acc = acc.to(tl.float16)\n    tl.store(p + tl.arange(0, 16), acc)\n")
    error = _compile_error(HEADER + "def kernel(p, n):\n" + body, tmp_path, torch.zeros(16), 3)
    assert "fp32 before the loop and fp16 inside it" in error.message and error.lineno == 9


def test_a_tvm_failure_names_the_kernel_and_the_stage(monkeypatch):
    from babytriton.lowering import pipeline

    def fail(*_args, **_kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(pipeline, "compile_module", fail)
    monkeypatch.setenv("BABYTRITON_CACHE", "0")   # not loaded from the disk cache either
    monkeypatch.setattr(kernels.scale_shift_kernel, "cache", {})   # compiled anew
    monkeypatch.setattr(kernels.scale_shift_kernel, "launchers", {})
    with pytest.raises(CompilationError, match="TVM failed to compile 'scale_shift_kernel' \\(during build\\)"):
        kernels.scale_shift(torch.randn(5), alpha=3.0)


# --- on the GPU (the lead's H200) -------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name, dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
@pytest.mark.parametrize("n", [37, 1000])
def test_kernel_on_gpu_agrees_with_torch(name, dtype, n):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    case = kernels.CASES[name]
    args = [a.cuda() if isinstance(a, torch.Tensor) else a
            for a in case.make(dtype, n, torch.Generator().manual_seed(2))]
    _close(case.run(*args), case.ref(*args), dtype)


@pytest.mark.gpu
def test_matmul_on_gpu_at_a_tutorial_size():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.randn(512, 384, device="cuda", dtype=torch.float16)
    b = torch.randn(384, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernels.matmul(a, b), kernels.matmul_ref(a, b), atol=2e-2, rtol=2e-2)

