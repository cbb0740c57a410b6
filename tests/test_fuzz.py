"""Differential fuzzing: every reproducer the fuzzer found stays fixed, a fixed-seed batch of random
programs compiles to what their eager runs compute, and the generator and minimiser do their jobs."""
from pathlib import Path

import pytest
import torch

from babytriton import eager
from babytriton.testing import fuzz

REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.py"))
CI_PROGRAMS = 200


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_fuzz_regression(path):
    outcome = fuzz.check_file(path)
    assert outcome.kind == "ok", outcome.detail


def test_fixed_seed_programs_match_their_eager_runs(tmp_path):
    report = fuzz.run(CI_PROGRAMS, seed=0, out=tmp_path)
    assert report.programs == CI_PROGRAMS
    assert report.invalid == [], [(s, o.detail) for s, o in report.invalid]
    problems = [f"seed {s}: {o.kind}: {o.detail}\n{path.read_text() if path else ''}" for s, o, path in report.failures]
    assert not problems, "\n\n".join(problems)


def test_programs_are_reproducible_and_varied():
    assert fuzz.generate(7).module_text() == fuzz.generate(7).module_text()
    texts = [fuzz.generate(fuzz.program_seed(0, i)).source for i in range(60)]
    assert len(set(texts)) == 60
    joined = "\n".join(texts)
    for feature in ("bt.Tensor((", "'d", ": bt.constexpr", " if ", "sum(", "astype(", "@", " // ", "where(",
                    " and ", "+=", "def mul_add", "softmax("):
        assert feature in joined, feature


def test_a_wrong_eager_op_is_caught_and_minimised(tmp_path, monkeypatch):
    """Break one eager table entry: the fuzzer reports the programs that use it, cut down."""
    monkeypatch.setitem(eager.TORCH, "sigmoid", lambda x: torch.sigmoid(x) + 1)
    text = ("# a hand-written program\nimport torch\nimport babytriton as bt\n\n\n@bt.jit(cache=False)\n"
            "def f(x0, x1):\n    v0 = x0 * 2\n    v1 = sigmoid(v0) - x1\n    v2 = v0 + 1\n    return v1, v2\n\n\n"
            "ARGS = [('tensor', (2, 3), 'float32'), ('tensor', (3,), 'float32')]\nSEED = 1\nTOLERANCES = None\n")
    path = tmp_path / "program.py"
    path.write_text(text)
    outcome = fuzz.check_file(path)
    assert outcome.kind == "mismatch" and "result 0" in outcome.detail
    small, small_outcome = fuzz.minimise(text, outcome, tmp_path)
    assert small_outcome.kind == "mismatch"
    body = small.split("def f(")[1].split("ARGS")[0]
    assert "sigmoid(" in body and "v2" not in body and "x1" not in body, small


def test_compare_reports_dtype_shape_and_values():
    a = torch.tensor([1.0, 2.0])
    assert fuzz.compare(a, a.clone(), [(0.0, 0.0)]) is None
    assert "dtype" in fuzz.compare(a, a.double(), None)
    assert "shape" in fuzz.compare(a, a[:1], None)
    assert "values differ" in fuzz.compare(a, a + 1e-3, [(0.0, 0.0)])
    assert fuzz.compare(a, a + 1e-3, [(1e-2, 0.0)]) is None
    assert "structure" in fuzz.compare((a,), a, None)
