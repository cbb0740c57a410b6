"""The exercises (exercises/): each check fails on its untouched starter, at a marked gap, and passes on
the reference solution; the starters are the chapters 14-27 with the answer taken out, the tutorial's
(14-21) built on chapter 13 alone, the course's exercises 9 and 10 (22, 23) on chapter 18, and its block
chapters' (24-27) on chapter 21, then each on the one before.

The checks run in this process (TVM is imported once); the meta_schedule check tunes one trial (its
intrinsics imported the quick way first, see `prepare`), the rest a few seconds each."""
import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


checks = _import(ROOT / "exercises" / "checks.py", "exercise_checks")
make_exercises = _import(ROOT / "scripts" / "make_exercises.py", "make_exercises")
STEMS = sorted(checks.CHECKS)
# the chapter each starter and solution builds on: 13 for the tutorial's exercises and the warm-ups
BASES = {"22_autodiff": "18_library_calls", "23_torch_names": "18_library_calls", "24_programs": "21_tir_backend",
         "25_block_reductions": "24_programs", "26_dot_tiles": "25_block_reductions",
         "27_autotune": "26_dot_tiles"}


def test_every_exercise_of_the_tutorial_and_three_warm_ups_have_a_check():
    chapters = sorted(p.stem for p in (ROOT / "chapters").glob("[0-9][0-9]_*.py") if p.name >= "14")
    assert STEMS == chapters + ["w1_subtract", "w2_negate", "w3_results"]
    assert sorted(make_exercises.EXERCISES) == chapters
    assert sorted(checks.TASKS) == STEMS
    assert [checks.TASKS[c][0] for c in chapters] == [f"task{make_exercises.EXERCISES[c][0]}" for c in chapters]


def prepare(stem):
    """Before exercise 2's starter or solution tunes: MetaSchedule's first TuneContext imports TVM's ~500
    TVMScript intrinsics for every kind of hardware (the chapter's own quick import takes 10-20 s in this
    process, with torch loaded); babytriton's tuning registers the package with only the CPU's, all that
    the check's CPU tuning can use, and the chapter finds it imported."""
    if stem == "15_meta_schedule":
        from babytriton.schedules import tuning
        tuning.import_tensor_intrinsics("llvm")


@pytest.mark.parametrize("stem", STEMS)
def test_the_check_fails_on_the_starter_at_its_gap(stem):
    prepare(stem)
    starter = checks.load(ROOT / "exercises" / f"{stem}.py")
    with pytest.raises(NotImplementedError, match=r"^(exercise [1-9][0-9]?|warm-up [1-3]) \("):
        checks.CHECKS[stem](starter)


@pytest.mark.parametrize("stem", STEMS)
def test_the_check_passes_on_the_solution(stem):
    prepare(stem)
    checks.CHECKS[stem](checks.load(checks.SOLUTIONS[stem]))


@pytest.mark.parametrize("stem", sorted(make_exercises.EXERCISES))
def test_the_starter_is_its_chapter_with_the_answer_taken_out(stem):
    """What scripts/make_exercises.py writes: after a change to a chapter, run it again."""
    assert (ROOT / "exercises" / f"{stem}.py").read_text() == make_exercises.starter(stem)


@pytest.mark.parametrize("stem", STEMS)
def test_starter_and_solution_build_on_their_base_chapter_alone(stem):
    for path in (ROOT / "exercises" / f"{stem}.py", checks.SOLUTIONS[stem]):
        tree = ast.parse(path.read_text())
        loaded = [ast.literal_eval(node.args[0]) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module")]
        assert loaded == [BASES.get(stem, "13_fusion")], path
        assert not any(isinstance(node, (ast.Import, ast.ImportFrom)) and "babytriton" in ast.unparse(node)
                       for node in ast.walk(tree)), path
