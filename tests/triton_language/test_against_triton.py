"""The tutorial and puzzle kernels run by Triton itself (the same source, only the imports changed back)
and by babytriton — interpreted and compiled — on the same inputs: Triton is the oracle where it exists
(the GPU machine)."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import kernels as K  # noqa: E402
import puzzles as P  # noqa: E402


def _as_triton(name: str, tmp_path_factory):
    """tests/triton_language/NAME.py with `import triton` / `import triton.language as tl`: Triton's own."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    source = (HERE / f"{name}.py").read_text() \
        .replace("import babytriton.triton as triton", "import triton") \
        .replace("import babytriton.triton.language as tl", "import triton.language as tl")
    path = tmp_path_factory.mktemp("real") / f"real_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"real_{name}", path)
    module = sys.modules[f"real_{name}"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return _as_triton("kernels", tmp_path_factory)


@pytest.fixture(scope="module")
def real_puzzles(tmp_path_factory):
    return _as_triton("puzzles", tmp_path_factory)


def _outputs(value):
    return value if isinstance(value, tuple) else (value,)


def _close(ours, theirs):
    for a, b in zip(_outputs(ours), _outputs(theirs)):
        a, b = a.cpu(), b.cpu()
        assert a.dtype == b.dtype
        scale = 1 + b.float().abs().nan_to_num().max().item() if b.numel() else 1
        err = (a.float() - b.float()).abs().nan_to_num().max().item() if a.numel() else 0
        assert err <= 1e-2 * scale, (err, scale)


@pytest.mark.parametrize("name", sorted(K.CASES))
@pytest.mark.parametrize("mode", ["interpret", "compiled"])
def test_each_kernel_equals_triton(real, name, mode, monkeypatch):
    case, theirs_case = K.CASES[name], real.CASES[name]
    if mode == "interpret":
        monkeypatch.setenv("BABYTRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("BABYTRITON_INTERPRET", raising=False)
    for dtype in case.dtypes:
        args = case.make(dtype, 37, torch.Generator().manual_seed(0))
        args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
        theirs = theirs_case.run(*args)
        ours = case.run(*args)
        _close(ours, theirs)


@pytest.mark.parametrize("name", sorted(P.PUZZLES))
@pytest.mark.parametrize("mode", ["interpret", "compiled"])
def test_each_puzzle_equals_triton(real_puzzles, name, mode, monkeypatch):
    """Each puzzle's solution run by Triton and by babytriton at the repository's sizes and at ragged
    ones (Triton's fp32 tl.dot rounds its operands to tf32: within the tolerance)."""
    if mode == "interpret":
        monkeypatch.setenv("BABYTRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("BABYTRITON_INTERPRET", raising=False)
    puzzle, theirs_puzzle = P.PUZZLES[name], real_puzzles.PUZZLES[name]
    for case in [None, *puzzle.ragged]:
        nelem, blocks = P.sizes(puzzle, case)
        args = P.inputs(puzzle, nelem, full_range=case is not None)
        theirs = real_puzzles.run(theirs_puzzle, [a.clone() for a in args], nelem, blocks, device="cuda")
        ours = P.run(puzzle, [a.clone() for a in args], nelem, blocks, device="cuda")
        _close(ours, theirs)
