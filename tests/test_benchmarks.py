"""The benchmark script's CPU mode runs end to end (CI smoke test; the numbers are not asserted)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cpu_benchmark_runs():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--cpu"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    for case in ("elementwise", "softmax", "layer_norm", "row_sum", "matmul_fp32", "matmul_fp16",
                 "call overhead (cpu, 2x3)", "cold compile (cpu)", "cold compile (cuda codegen)"):
        assert f"| {case} |" in out.stdout, out.stdout
