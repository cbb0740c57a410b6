"""Schedule modes: Dlight (+ babytriton's rules), Fallback, MetaSchedule with a reused database."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

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
