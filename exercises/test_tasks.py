"""Check your exercises: `pytest exercises` runs every check on your files in exercises/,
`pytest exercises -k if_else` (or `-m task3`) one of them. A check compiles small functions with your JIT and
compares what they compute with torch; see checks.py for what each one asks."""
from pathlib import Path

import pytest

import checks

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("stem", [pytest.param(stem, marks=getattr(pytest.mark, checks.TASKS[stem][0]))
                                  for stem in sorted(checks.CHECKS)])
def test_exercise(stem):
    checks.CHECKS[stem](checks.load(HERE / f"{stem}.py"))
