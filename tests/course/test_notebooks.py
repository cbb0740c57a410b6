"""The notebooks, executed top to bottom by a real Jupyter kernel, as a reader runs them.

A notebook passes when every cell runs without an error (nbclient raises on the first one): that test
is tests/course/test_book.py's `test_every_notebook_runs_under_jupyter`, in the process that renders the same
executions (a worker of its own would run each notebook a second time: 04 alone takes 90 s on 2 cores).
Each run has a disk cache of its own in a temporary folder. Committed notebooks carry no outputs, so
the repository stays light.
"""
import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_BYTES = 300_000


def execute(path: Path, cwd: Path):
    """The notebook executed by a Jupyter kernel, with a disk cache of its own; once per session, as
    tests/course/test_book.py renders the same executions (scripts/build_book.py)."""
    return build_book.execute_notebook(path, cwd)


def outputs(nb) -> list:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def text_of(nb) -> str:
    return "".join(out.get("text", "") for out in outputs(nb))


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_small_and_without_outputs(path):
    assert path.stat().st_size < MAX_BYTES
    nb = json.loads(path.read_text())
    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    assert code and all(not cell["outputs"] and cell["execution_count"] is None for cell in code)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def test_the_autograd_notebook_shows_the_backward_and_a_fallback():
    """Notebook 6: gradients equal to torch's, the backward's stages (the Gradient output among them), its
    fused kernels with the user's lines, its LLVM source, and the warning of a fallback."""
    nb = execute(ROOT / "notebooks" / "06_autograd.ipynb", ROOT / "notebooks")
    shown = text_of(nb) + "".join(out.get("data", {}).get("text/plain", "") for out in outputs(nb))
    assert "x.grad (8, 32) matches torch" in shown and "b.grad (32,) matches torch" in shown
    assert "'backward'," in shown and "def layernorm_backward(" in shown and "R.collapse_sum_to(" in shown
    assert "kernel fused_rows_" in shown and "m = x.mean(axis=1, keepdims=True)" in shown
    assert "_compute_(" in shown
    assert any("image/svg+xml" in out.get("data", {}) for out in outputs(nb))
    assert "GradientFallbackWarning: babytriton: the backward of 'gated' is not compiled" in shown
    assert "a run-time `if`" in shown


def test_every_notebook_is_listed_in_the_readme():
    readme = (ROOT / "notebooks" / "README.md").read_text()
    for path in NOTEBOOKS:
        assert f"`{path.name}`" in readme


RESULTS = """# Benchmarks

## NVIDIA H100 80GB HBM3

| case | babytriton | eager | torch.compile | triton | GB/s | TFLOP/s | ratio |
|---|---|---|---|---|---|---|---|
| elementwise (4096x4096) | 215.10 us | 480.20 us | 230.00 us | 221.40 us | 1480 |  | 1.07x |
| matmul_fp16 (4096^3) | 1.234 ms | 1.190 ms | 1.201 ms |  |  | 111.4 | 0.97x |

## CPU

| case | kernels | babytriton | eager | torch.compile | triton | GB/s | TFLOP/s | ratio |
|---|---|---|---|---|---|---|---|---|
| call overhead | 1 | 4.10 us | 2.90 us |  |  |  |  | 0.71x |
| case | babytriton | eager |
|---|---|---|
| cold compile (cpu) | 56.142 ms |  |
"""


def test_the_benchmark_plot_reads_results_md(tmp_path):
    """Notebook 4's benchmark cells, run where a benchmarks/RESULTS.md exists: they plot every table, with
    the compile times (ms) on axes of their own, not beside the times per call (µs)."""
    source = nbformat.read(ROOT / "notebooks" / "04_gpu_schedules.ipynb", as_version=4)
    setup = next(cell for cell in source.cells if cell.cell_type == "code")
    tagged = [cell for cell in source.cells if "benchmark-plot" in cell.metadata.get("tags", [])]
    assert tagged
    nb = nbformat.v4.new_notebook(cells=[setup, *tagged], metadata=source.metadata)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "RESULTS.md").write_text(RESULTS)
    path = tmp_path / "notebooks" / "plot.ipynb"
    nbformat.write(nb, path)
    ran = execute(path, path.parent)
    assert "plotted 3 cases from 3 table(s), and 1 compile time(s) on their own axes" in text_of(ran)
    assert any("image/png" in out.get("data", {}) for out in outputs(ran))
