"""The package's one-way layers (pyproject.toml, [tool.importlinter]; book/docs/guide/layout.md), checked by
import-linter's `lint-imports`: imports inside functions count."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the babytriton package under `root`, with the contract in root/pyproject.toml."""
    command = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([command, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_package_imports_only_downwards():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert f"{contracts} kept, 0 broken" in result.stdout  # the folders' layers, and each folder's own


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "babytriton", tmp_path / "babytriton", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "babytriton" / "core" / "targets.py", "a") as f:
        f.write("\n\ndef _driver():\n    from ..jit import JITFunction\n    return JITFunction\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "babytriton.core is not allowed to import babytriton.jit" in result.stdout   # the layer (a folder)
    assert "babytriton.core.targets -> babytriton.jit" in result.stdout                 # the import that broke it
