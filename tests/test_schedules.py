"""Schedule modes: Dlight (+ babytriton's rules), Fallback, MetaSchedule with a reused database."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import tvm

import babytriton as bt
from babytriton import schedules

SM90 = {"kind": "cuda", "arch": "sm_90"}
BIG = bt.Tensor((1024, 1024), "float32")


def chain(a: BIG, b: BIG):
    return (a + b) * a - b


def test_elementwise_rule_vectorises_on_gpu():
    k = bt.jit(target=SM90)(chain).compile()
    assert "T.vectorized(T.int64(4))" in k.stages["schedule"]
    assert "float4" in k.source
    fallback = bt.jit(target=SM90, schedule="fallback")(chain).compile()
    assert "float4" not in fallback.source and "T.vectorized" not in fallback.stages["schedule"]


def ragged(a: bt.Tensor((999, 3), "float32")):
    return a * 2.0


def test_elementwise_rule_leaves_ragged_sizes_to_fallback():
    k = bt.jit(target=SM90)(ragged).compile()
    assert "T.vectorized" not in k.stages["schedule"] and "threadIdx.x" in k.stages["schedule"]


def mm(a: bt.Tensor((64, 32), "float16"), b: bt.Tensor((32, 16), "float16")):
    return a @ b + 1.0


def test_gpu_matmul_goes_to_cublas_through_torch():
    k = bt.jit(target=SM90)(mm).compile()
    assert 'R.call_dps_packed("babytriton.torch_matmul"' in k.stages["MatmulToCuBLAS"]
    assert "matmul" not in k.stages["FuseTIR"].split("def ")[1].split("(")[0]  # only the add is a kernel
    tir = bt.jit(target=SM90, schedule="fallback")(mm).compile()
    assert "MatmulToCuBLAS" not in tir.stages and "matmul" in tir.source


def test_cpu_schedule_stage_and_results():
    f = bt.jit(target="cpu")(chain)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.testing.assert_close(f(a, b), (a + b) * a - b)
    assert "T.prim_func" in f.compile(a, b).stages["schedule"]


def test_meta_schedule_explains_missing_extras(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a))
    with pytest.raises(ImportError, match=r"needs xgboost: pip install 'babytriton\[tune\]'"):
        schedules.require_tuning_extras()


SMALL = bt.Tensor((32, 32), "float32")


def tuned(a: SMALL, b: SMALL):
    return a @ b + 1.0


def test_meta_schedule_tunes_once_and_later_processes_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    f = bt.jit(schedule="meta_schedule", trials=4)(tuned)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    torch.testing.assert_close(f(a, b), a @ b + 1.0, rtol=1e-4, atol=1e-4)
    assert "tirx.is_scheduled" in f.compile(a, b).stages["schedule"]
    assert any((tmp_path / "meta_schedule").rglob("database_tuning_record.json"))

    # a new process: the database answers, so tuning must not run (it would raise here)
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tvm.s_tir.meta_schedule as ms
        def refuse(*a, **k):
            raise AssertionError("tuned again")
        ms.tune_tasks = refuse
        import babytriton as bt
        from test_schedules import tuned
        f = bt.jit(schedule="meta_schedule", trials=4)(tuned)
        a, b = torch.randn(32, 32), torch.randn(32, 32)
        torch.testing.assert_close(f(a, b), a @ b + 1.0, rtol=1e-4, atol=1e-4)
        print("reused")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "BABYTRITON_CACHE_DIR": str(tmp_path)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reused" in out.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["dlight", "fallback"])
def test_gpu_schedules_agree_with_torch(schedule):
    f = bt.jit(target="gpu", schedule=schedule)(chain)
    a, b = torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    torch.testing.assert_close(f(a, b), (a + b) * a - b)
    g = bt.jit(target="gpu", schedule=schedule)(mm)
    x = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    y = torch.randn(32, 16, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(g(x, y), x @ y + 1.0, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_meta_schedule(tmp_path, monkeypatch):
    for extra in schedules.TUNE_EXTRAS:
        pytest.importorskip(extra)
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    f = bt.jit(target="gpu", schedule="meta_schedule", trials=8)(tuned)
    a, b = torch.randn(32, 32, device="cuda"), torch.randn(32, 32, device="cuda")
    torch.testing.assert_close(f(a, b), a @ b + 1.0, rtol=1e-3, atol=1e-3)


def row_sum(x: bt.Tensor((512, 2048), "float32")):
    return x.sum(axis=-1)


def column_sum(x: bt.Tensor((512, 2048), "float32")):
    return x.sum(axis=0)


def test_row_reduction_rule_takes_contiguous_row_reductions_only():
    rows = bt.jit(target=SM90)(row_sum).compile()
    assert 'T.int64(256), thread="threadIdx.x"' in rows.stages["schedule"]
    assert "T.unroll(T.int64(4))" in rows.stages["schedule"] and "__shfl_down_sync" in rows.source
    columns = bt.jit(target=SM90)(column_sum).compile()
    assert "T.unroll(T.int64(4))" not in columns.stages["schedule"]


@pytest.mark.gpu
def test_gpu_row_reductions_agree_with_torch():
    x = torch.randn(512, 2048, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(row_sum)(x), x.sum(-1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(bt.jit(target="gpu")(column_sum)(x), x.sum(0), rtol=1e-4, atol=1e-3)


# -- every layout: the Elementwise rule vectorises only what is contiguous in every buffer -------

def transposed_half(a: bt.Tensor((512, 256), "float16")):
    return bt.permute_dims(a) * 2.0


def batch_swap(a: bt.Tensor((64, 32, 128), "float16")):
    return bt.permute_dims(a, [1, 0, 2]) + 1.0  # rows move, each row stays contiguous


def scaled_rows(a: BIG, w: bt.Tensor((1024,), "float32")):
    return a * w + 1.0


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def test_elementwise_rule_does_not_vectorise_a_transpose():
    k = bt.jit(target=SM90)(transposed_half).compile()
    assert "T.vectorized" not in k.stages["schedule"] and "threadIdx.x" in k.stages["schedule"]
    if shutil.which("nvcc"):  # vectorised, this was make_uint4 of 8 halves: nvcc rejected it
        assert b".entry" in nvcc_ptx(k.source)


def test_elementwise_rule_vectorises_contiguous_rows_and_broadcasts():
    assert "T.vectorized(T.int64(8))" in bt.jit(target=SM90)(batch_swap).compile().stages["schedule"]
    assert "T.vectorized(T.int64(4))" in bt.jit(target=SM90)(scaled_rows).compile().stages["schedule"]


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
    assert kernel.name == schedules.TORCH_MATMUL_T.get((ta, tb), schedules.TORCH_MATMUL)
    assert not k.source or b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("ta, tb", [(False, True), (True, False), (True, True)])
def test_the_transposed_cublas_calls_compute_torch_products(ta, tb):
    from babytriton.types import torch_to_vm, vm_to_torch
    m, k, n = 5, 4, 3
    a = torch.randn(2, 3, *((k, m) if ta else (m, k)))
    b = torch.randn(2, 3, *((n, k) if tb else (k, n)))
    out = torch.empty(2, 3, m, n)
    vm_out = torch_to_vm(out)
    tvm.get_global_func(schedules.TORCH_MATMUL_T[(ta, tb)])(torch_to_vm(a), torch_to_vm(b), vm_out)
    expected = (a.mT if ta else a) @ (b.mT if tb else b)
    torch.testing.assert_close(vm_to_torch(vm_out), expected)


HEADS = bt.Tensor((4, 16, 1024, 64), "float16")


def attention(q: HEADS, k: HEADS, v: HEADS):
    s = q @ bt.permute_dims(k, [0, 1, 3, 2]) * 0.125
    e = bt.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def test_attention_compiles_to_two_cublas_calls_and_one_softmax_kernel():
    k = bt.jit(target=SM90)(attention).compile()
    assert [kernel.name.split("_")[0] for kernel in k.fusion] == ["babytriton.torch", "fused", "babytriton.torch"]
    assert k.fusion[0].name == schedules.TORCH_MATMUL_T[(False, True)]
    assert [op.op for op in k.fusion[0].ops] == ["permute_dims", "matmul"]  # the transpose is a view
    (softmax_kernel,) = fusion_names(k.source)
    assert 'T.int64(65536), thread="blockIdx.x"' in k.stages["schedule"]  # a block per row of scores
    if shutil.which("nvcc"):
        assert nvcc_ptx(k.source).count(b".entry ") == 1


def fusion_names(source):
    from babytriton.fusion import cuda_kernel_names
    return cuda_kernel_names(source)


@pytest.mark.gpu
def test_gpu_attention_and_transposed_products_agree_with_torch():
    q, k, v = (torch.randn(4, 16, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    expected = torch.softmax((q @ k.mT).float() * 0.125, -1).half() @ v
    torch.testing.assert_close(bt.jit(target="gpu")(attention)(q, k, v), expected, rtol=2e-2, atol=2e-2)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a, b = torch.randn(2, 3, 64, 32, device="cuda", dtype=dtype), torch.randn(2, 3, 48, 64, device="cuda", dtype=dtype)
        tol = 1e-2 if dtype != torch.float32 else 1e-4
        torch.testing.assert_close(bt.jit(target="gpu")(batched(str(dtype)[6:], 4, True, True))(a, b),
                                   a.mT @ b.mT, rtol=tol, atol=tol)
    x = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(bt.jit(target="gpu")(transposed_half)(x), x.T * 2.0)
