"""examples/: each runs as a user runs it, from the repository root, and again with what the first run
left in the disk cache (a second run hits the disk: nothing in an example may assume it compiles)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_example_runs_twice(path, tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    for run in ("cold", "from the disk cache"):
        done = subprocess.run([sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{path.name}, {run}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"{path.name} printed nothing"
