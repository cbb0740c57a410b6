"""examples/: each runs as a user runs it, from the repository root, and again with what the first run
left in the disk cache (a second run hits the disk: nothing in an example may assume it compiles)."""
from pathlib import Path

import chapter_zygote
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_example_runs_twice(path, tmp_path, monkeypatch):
    """Each run a fresh Python as the chapters' (tests/chapter_zygote.py: torch and TVM imported, not babytriton)."""
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    for run in ("cold", "from the disk cache"):
        done = chapter_zygote.run(path, ROOT)
        assert done.returncode == 0, f"{path.name}, {run}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"{path.name} printed nothing"
