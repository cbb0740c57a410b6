"""What the GPU pipeline hands to torch: matrix products (cuBLAS) and attention blocks (SDPA).

The rewrites run on a cuda target, which compiles on a machine without a GPU; the packed functions
they call are torch code, checked here on CPU tensors and on a GPU where there is one."""
import math
import os
import shutil

import numpy as np
import pytest
import torch
import tvm

import babytriton as bt
from babytriton.passes import offload
from babytriton.runtime import kernel as runtime
from babytriton.core.dlpack import torch_to_vm, vm_to_torch

SM90 = {"kind": "cuda", "arch": "sm_90"}


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


# --------------------------------------------------------------------------------------------------
# matrix products
# --------------------------------------------------------------------------------------------------

def batched(dtype, ndim, ta, tb):
    batch = (2, 3)[:ndim - 2]
    perm = list(range(ndim - 2)) + [ndim - 1, ndim - 2]
    A = bt.Tensor(batch + ((64, 32) if ta else (32, 64)), dtype)
    B = bt.Tensor(batch + ((48, 64) if tb else (64, 48)), dtype)

    def product(a: A, b: B):
        if ta:
            a = bt.permute_dims(a, perm)
        if tb:
            b = bt.permute_dims(b, perm)
        return a @ b
    return product


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("ndim", [3, 4])
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
def test_batched_products_go_to_cublas_with_transposes_as_views(dtype, ndim, ta, tb):
    k = bt.jit(target=SM90)(batched(dtype, ndim, ta, tb)).compile()
    (kernel,) = k.fusion
    assert kernel.name == offload.TORCH_MATMUL_T.get((ta, tb), offload.TORCH_MATMUL)
    assert kernel.rule == "torch.matmul"
    assert not k.source or b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("ta, tb", [(False, True), (True, False), (True, True)])
def test_the_transposed_cublas_calls_compute_torch_products(ta, tb):
    m, k, n = 5, 4, 3
    a = torch.randn(2, 3, *((k, m) if ta else (m, k)))
    b = torch.randn(2, 3, *((n, k) if tb else (k, n)))
    out = torch.empty(2, 3, m, n)
    vm_out = torch_to_vm(out)
    tvm.get_global_func(offload.TORCH_MATMUL_T[(ta, tb)])(torch_to_vm(a), torch_to_vm(b), vm_out)
    expected = (a.mT if ta else a) @ (b.mT if tb else b)
    torch.testing.assert_close(vm_to_torch(vm_out), expected)


def mlp(x, w1, b1, w2, b2):
    return bt.gelu(x @ w1 + b1) @ w2 + b2


def bias_first_transposed(x, w, b):
    return b + x @ bt.permute_dims(w)


def bias_not_a_vector(x, w, b2d):
    return x @ w + b2d


def product_also_returned(x, w, b):
    y = x @ w
    return y + b, y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_product_plus_a_bias_vector_is_one_cublas_call(dtype):
    x, w1, b1, w2, b2 = (torch.randn(*s, dtype=dtype) for s in [(4, 8, 32), (32, 64), (64,), (64, 16), (16,)])
    k = bt.jit(target=SM90)(mlp).compile(x, w1, b1, w2, b2)
    assert [kernel.name for kernel in k.fusion] == [offload.TORCH_MATMUL_BIAS[(False, False)], "gelu",
                                                    offload.TORCH_MATMUL_BIAS[(False, False)]]
    assert [op.op for op in k.fusion[0].ops] == ["matmul", "add"]
    x, w, b = torch.randn(8, 32, dtype=dtype), torch.randn(16, 32, dtype=dtype), torch.randn(16, dtype=dtype)
    (kernel,) = bt.jit(target=SM90)(bias_first_transposed).compile(x, w, b).fusion
    assert kernel.name == offload.TORCH_MATMUL_BIAS[(False, True)]


def test_what_is_no_bias_epilogue_stays_an_add():
    x, w, b = torch.randn(8, 32), torch.randn(32, 16), torch.randn(16)
    for fn, args in ((bias_not_a_vector, (x, w, torch.randn(8, 16))), (product_also_returned, (x, w, b))):
        names = [kernel.name for kernel in bt.jit(target=SM90)(fn).compile(*args).fusion]
        assert offload.TORCH_MATMUL in names and not any("bias" in name for name in names)


@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_the_bias_calls_compute_torch_results(ta, tb, batch):
    if ta and batch:
        pytest.skip("the rewrite leaves transposed batched rows alone")
    m, k, n = 5, 4, 3
    a = torch.randn(*batch, *((k, m) if ta else (m, k)))
    b = torch.randn(*((n, k) if tb else (k, n)))
    bias = torch.randn(n)
    out = torch.empty(*batch, m, n)
    vm_out = torch_to_vm(out)
    tvm.get_global_func(offload.TORCH_MATMUL_BIAS[(ta, tb)])(torch_to_vm(a), torch_to_vm(b), torch_to_vm(bias), vm_out)
    expected = (a.mT if ta else a) @ (b.mT if tb else b) + bias
    torch.testing.assert_close(vm_to_torch(vm_out), expected)


# --------------------------------------------------------------------------------------------------
# attention, written the ways users write it
# --------------------------------------------------------------------------------------------------

HEADS = bt.Tensor((4, 16, 1024, 64), "float16")
KT = bt.Tensor((4, 16, 64, 1024), "float16")


def composed(q: HEADS, k: HEADS, v: HEADS):
    s = q @ bt.permute_dims(k, [0, 1, 3, 2]) * 0.125
    e = bt.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def library(q: HEADS, k: HEADS, v: HEADS):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * scale, axis=-1) @ v


def divided_scale_first(q: HEADS, k: HEADS, v: HEADS):
    s = 8.0 * (q @ bt.permute_dims(k, (0, 1, 3, 2))) / 64.0
    return bt.softmax(s, axis=3) @ v


def unscaled_kt_given(q: HEADS, kt: KT, v: HEADS):
    return bt.softmax(q @ kt, axis=-1) @ v


def three_d(q: bt.Tensor((8, 256, 32), "bfloat16"), k: bt.Tensor((8, 256, 32), "bfloat16"),
            v: bt.Tensor((8, 256, 48), "bfloat16")):
    return bt.softmax(q @ bt.permute_dims(k, (0, 2, 1)) / math.sqrt(32), axis=-1) @ v


def symbolic(q: bt.Tensor(("b", 4, "n", 64), "float32"), k: bt.Tensor(("b", 4, "n", 64), "float32"),
             v: bt.Tensor(("b", 4, "n", 64), "float32")):
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * 0.125, axis=-1) @ v


@pytest.mark.parametrize("fn, name, ops", [
    # a float16 product times a number: computed in float32 and rounded once, as torch does
    (composed, offload.TORCH_ATTENTION, ["permute_dims", "matmul", "astype", "multiply", "astype", "max", "subtract",
                                         "exp", "sum", "divide", "matmul"]),
    (library, offload.TORCH_ATTENTION, ["permute_dims", "matmul", "astype", "multiply", "astype", "nn.softmax",
                                        "matmul"]),
    (divided_scale_first, offload.TORCH_ATTENTION, None),
    (unscaled_kt_given, offload.TORCH_ATTENTION_KT, ["matmul", "nn.softmax", "matmul"]),
    (three_d, offload.TORCH_ATTENTION, None),
    (symbolic, offload.TORCH_ATTENTION, None),
])
def test_attention_blocks_become_one_sdpa_call(fn, name, ops):
    k = bt.jit(target=SM90)(fn).compile()
    (kernel,) = k.fusion
    assert kernel.name == name and kernel.rule == "SDPA"
    if ops is not None:
        assert [op.op for op in kernel.ops] == ops
    assert all(op.line is not None for op in kernel.ops)  # every absorbed op keeps its source line
    assert "AttentionToSDPA" in k.stages and "call_dps_packed" in k.stages["AttentionToSDPA"]


def test_the_scale_is_the_users_constant():
    k = bt.jit(target=SM90)(divided_scale_first).compile()
    assert "T.float64(0.125)" in k.stages["AttentionToSDPA"]


def scores_also_returned(q: HEADS, k: HEADS, v: HEADS):
    s = q @ bt.permute_dims(k, (0, 1, 3, 2)) * 0.125
    return bt.softmax(s, axis=-1) @ v, s


def softmax_over_queries(q: HEADS, k: HEADS, v: HEADS):
    p = bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)), axis=-2)
    return p @ v


def runtime_scale(q: HEADS, k: HEADS, v: HEADS, scale: float):
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * scale, axis=-1) @ v


def broadcast_keys(q: HEADS, k: bt.Tensor((1, 16, 1024, 64), "float16"), v: HEADS):
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)), axis=-1) @ v


def masked(q: HEADS, k: HEADS, v: HEADS, mask: bt.Tensor((1024, 1024), "float16")):
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) + mask, axis=-1) @ v


@pytest.mark.parametrize("fn", [scores_also_returned, softmax_over_queries, runtime_scale, broadcast_keys, masked])
def test_what_is_not_an_attention_block_stays_as_written(fn):
    k = bt.jit(target=SM90)(fn).compile()
    assert offload.TORCH_ATTENTION not in k.stages["AttentionToSDPA"]
    assert any(kernel.name.startswith(offload.TORCH_MATMUL) for kernel in k.fusion)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k_transposed", [False, True])
def test_the_sdpa_call_computes_the_users_attention(dtype, k_transposed):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 17, 8, dtype=dtype), torch.randn(2, 3, 11, 8, dtype=dtype), torch.randn(2, 3, 11, 5, dtype=dtype)
    out = torch.empty(2, 3, 17, 5, dtype=dtype)
    keys = k.mT.contiguous() if k_transposed else k
    name = offload.TORCH_ATTENTION_KT if k_transposed else offload.TORCH_ATTENTION
    vm_out = torch_to_vm(out)
    tvm.get_global_func(name)(torch_to_vm(q), torch_to_vm(keys), torch_to_vm(v), 0.3, vm_out)
    expected = torch.softmax((q.double() @ k.double().mT) * 0.3, -1) @ v.double()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(vm_to_torch(vm_out).double(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", ["composed", "library"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cpu_attention_goes_to_sdpa_and_agrees_with_torch(fn, dtype):
    # a half product on a CPU is computed in float32 and rounded once (RelaxCodeGen.matmul): the
    # pattern takes that form too
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 16, dtype=dtype) for _ in range(3))
    f = bt.jit(target="cpu")(generic_composed if fn == "composed" else generic_library)
    (kernel,) = f.compile(q, k, v).fusion
    assert kernel.rule == "SDPA" and "torch_matmul" not in f.compile(q, k, v).stages.get("MatmulToTorch", "")
    expected = torch.softmax((q.double() @ k.double().mT) * 0.125, -1) @ v.double()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(f(q, k, v).double(), expected, rtol=tol, atol=tol)


CPUS = {"zen5": ("AuthenticAMD", frozenset({"avx512f", "avx512_bf16", "f16c"})),
        "sapphire rapids": ("GenuineIntel", frozenset({"avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16"}))}


@pytest.mark.parametrize("cpu, dtype, shapes, to_torch", [
    ("zen5", torch.float32, [(64, 64), (64, 64)], True),          # small: MKL's one thread beats waking the pool
    ("zen5", torch.float32, [(4, 16, 32), (4, 32, 64)], True),     # batched, 2^17 multiply-adds
    ("zen5", torch.float32, [(512, 512), (512, 512)], False),     # CPUMatmul beats MKL off Intel
    ("zen5", torch.float16, [(64, 64), (64, 64)], False),         # no half product kernel in torch there
    ("zen5", torch.bfloat16, [(512, 512), (512, 512)], True),
    ("sapphire rapids", torch.float32, [(512, 512), (512, 512)], True),
    ("sapphire rapids", torch.float16, [(512, 512), (512, 512)], True),
])
def test_cpu_products_go_where_the_cpu_runs_them_faster(monkeypatch, cpu, dtype, shapes, to_torch):
    """targets.offloaded_matmuls: the host CPU's vendor and features, and a product's size, decide
    between torch.matmul and CPUMatmul; either way the result is torch's."""
    from babytriton.core import targets
    monkeypatch.setattr(targets, "host_cpu", lambda: CPUS[cpu])
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)

    def product(a, b):
        return a @ b * 2.0
    torch.manual_seed(0)
    a, b = (torch.randn(*shape).to(dtype) for shape in shapes)
    f = bt.jit(target="cpu")(product)
    rules = [kernel.rule for kernel in f.compile(a, b).fusion]
    assert ("torch.matmul" in rules) == to_torch and ("CPUMatmul" in rules) == (not to_torch), rules
    tol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(f(a, b), product(a, b), rtol=tol, atol=tol)


def test_symbolic_products_follow_the_rule_for_large_ones(monkeypatch):
    from babytriton.core import targets
    monkeypatch.setattr(targets, "host_cpu", lambda: CPUS["zen5"])
    N = bt.Tensor(("n", 64), "float32")
    W = bt.Tensor((64, 64), "float32")

    def product(a: N, b: W):
        return a @ b
    a, b = torch.randn(8, 64), torch.randn(64, 64)
    f = bt.jit(target="cpu")(product)
    assert [kernel.rule for kernel in f.compile(a, b).fusion] == ["CPUMatmul"]   # its size is not known
    torch.testing.assert_close(f(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_the_cpu_is_read_from_linux():
    from babytriton.core import targets
    vendor, flags = targets.host_cpu()
    if os.path.exists("/proc/cpuinfo"):
        assert vendor and ("sse2" in flags or "fp" in flags or "asimd" in flags), (vendor, sorted(flags)[:5])
    else:
        assert (vendor, flags) == ("", frozenset())


@pytest.mark.usefixtures("products_as_kernels")
def test_cpu_products_alone_stay_babytritons_kernels():
    def product(a, b):
        return (a @ b) * 2.0
    a = torch.randn(64, 32, dtype=torch.float16)
    kernels = bt.jit(target="cpu")(product).compile(a, a.mT.contiguous()).fusion
    assert [kernel.rule for kernel in kernels] == ["CPUMatmul"]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_block_with_other_kernels_still_compiles():
    def attention_then_residual(q: HEADS, k: HEADS, v: HEADS):
        return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * 0.125, axis=-1) @ v + q * 2.0
    k = bt.jit(target=SM90)(attention_then_residual).compile()
    assert [kernel.rule for kernel in k.fusion][0] == "SDPA" and len(k.fusion) == 2
    assert nvcc_ptx(k.source).count(b".entry ") == 1


def generic_composed(q, k, v):
    s = q @ bt.permute_dims(k, [0, 1, 3, 2]) * 0.125
    e = bt.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def generic_library(q, k, v):
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * 0.125, axis=-1) @ v


def generic_divided(q, k, v):
    return bt.softmax((q @ bt.permute_dims(k, (0, 1, 3, 2))) / 8.0, axis=-1) @ v


@pytest.mark.parametrize("fn", [generic_composed, generic_divided])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_every_float_dtype_is_matched(fn, dtype):
    x = torch.randn(2, 3, 32, 16, dtype=dtype)  # bfloat16 takes its row maximum in float32
    assert bt.jit(target=SM90)(fn).compile(x, x, x).fusion[0].rule == "SDPA"


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [generic_composed, generic_divided])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_attention_agrees_with_torch(fn, dtype):
    q, k, v = (torch.randn(4, 16, 1024, 64, device="cuda", dtype=dtype) for _ in range(3))
    jitted = bt.jit(target="gpu")(fn)
    assert jitted.compile(q, k, v).fusion[0].rule == "SDPA"
    expected = torch.softmax((q.double() @ k.double().mT) * 0.125, -1) @ v.double()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(jitted(q, k, v).double(), expected, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_mlp_with_bias_epilogues_agrees_with_torch(dtype):
    x, w1, b1, w2, b2 = (torch.randn(*s, device="cuda", dtype=dtype) / 4 for s in [(4, 64, 256), (256, 512), (512,), (512, 128), (128,)])
    expected = torch.nn.functional.gelu(x.double() @ w1.double() + b1.double()) @ w2.double() + b2.double()
    tol = {torch.float32: 1e-4, torch.float16: 3e-2, torch.bfloat16: 6e-2}[dtype]  # bf16: 8 bits, rounded twice
    torch.testing.assert_close(bt.jit(target="gpu")(mlp)(x, w1, b1, w2, b2).double(), expected, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_gpu_transposed_products_agree_with_torch():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a, b = torch.randn(2, 3, 64, 32, device="cuda", dtype=dtype), torch.randn(2, 3, 48, 64, device="cuda", dtype=dtype)
        tol = 1e-2 if dtype != torch.float32 else 1e-4
        torch.testing.assert_close(bt.jit(target="gpu")(batched(str(dtype)[6:], 4, True, True))(a, b),
                                   a.mT @ b.mT, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------------
# a function that is one torch call runs it directly
# --------------------------------------------------------------------------------------------------

def product(a, b):
    return a @ b


def product_transposed(a, b):
    return a @ bt.permute_dims(b)


def affine(x, w, b):
    return x @ w + b


def scaled_product(a, b):
    return (a @ b) * 2.0


@pytest.fixture
def without_the_vm(monkeypatch):
    """Calls that would make a Relax VM fail the test."""
    def refuse(self, device_index):
        raise AssertionError("the call went through the Relax VM")
    monkeypatch.setattr(runtime.Kernel, "_new_vm_function", refuse)


ONE_CALL = [  # (function, argument shapes, torch's result)
    (product, [(64, 32), (32, 48)], lambda a, b: a @ b),
    (product, [(2, 3, 16, 8), (2, 3, 8, 4)], lambda a, b: a @ b),
    (product_transposed, [(64, 32), (48, 32)], lambda a, b: a @ b.mT),
    (affine, [(4, 8, 32), (32, 16), (16,)], lambda x, w, b: x @ w + b),
    (generic_library, [(2, 4, 64, 16)] * 3, lambda q, k, v: torch.softmax(q @ k.mT * 0.125, -1) @ v),
    (generic_divided, [(2, 4, 64, 16)] * 3, lambda q, k, v: torch.softmax(q @ k.mT / 8.0, -1) @ v),
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("fn, shapes, reference", ONE_CALL, ids=lambda x: getattr(x, "__name__", None))
def test_a_function_that_is_one_torch_call_runs_without_the_vm(fn, shapes, reference, device, without_the_vm):
    """A product, a product plus a bias, attention: the compiled function is one packed call into
    torch, which the call makes itself (no VM, no packed call, no conversions)."""
    args = [torch.randn(*shape, device=device) for shape in shapes]
    if fn in (product, product_transposed):   # a column-major first operand: its memory taken as it is
        args = [args[0].mT.contiguous().mT, *args[1:]]   # (frontend/layouts.py), the call still torch's alone
    f = bt.jit(target="gpu" if device == "cuda" else "cpu")(fn)
    assert f.compile(*args).direct_call is not None
    out = f(*args)
    torch.testing.assert_close(out, reference(*args), rtol=1e-5, atol=1e-5)
    assert out.is_contiguous()
    torch.testing.assert_close(f(*args), reference(*args), rtol=1e-5, atol=1e-5)


def test_what_is_more_than_one_torch_call_goes_through_the_vm():
    x, w1, b1, w2, b2 = (torch.randn(*s) for s in [(4, 32), (32, 64), (64,), (64, 16), (16,)])
    assert bt.jit(target="cpu")(mlp).compile(x, w1, b1, w2, b2).direct_call is None
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    scaled = bt.jit(target="cpu")(scaled_product)
    assert scaled.compile(a, b).direct_call is None
    torch.testing.assert_close(scaled(a, b), (a @ b) * 2.0)


def test_numpy_arguments_of_a_one_call_function_go_through_the_vm():
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    f = bt.jit(target="cpu")(product)
    out = f(a.numpy(), b.numpy())
    assert isinstance(out, np.ndarray) and np.allclose(out, (a @ b).numpy(), atol=1e-5)
    torch.testing.assert_close(f(a, b), a @ b)
