"""Task markers, minitorch-style: `pytest exercises -m task3` runs the check of exercise 3 (if/else),
`pytest exercises -m warmup` the warm-ups; and a failed check's report opens on what is missing."""
import re
from pathlib import Path

import pytest

import checks

HERE = Path(__file__).resolve().parent
# what a starter's gap raises: NotImplementedError("exercise 3 (if/else): CodeGenerator.visit_If")
GAP = re.compile(r"(exercise \d+|warm-up \d+) \((.*?)\): (\S+)(.*)", re.DOTALL)


def pytest_configure(config):
    for stem, (marker, what) in checks.TASKS.items():
        config.addinivalue_line("markers", f"{marker}: {what} ({stem}.py)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    stem = getattr(item, "callspec", None) and item.callspec.params.get("stem")
    if report.failed and call.excinfo is not None and stem:
        report.longrepr = explained(stem, call.excinfo)
    return report


def explained(stem: str, excinfo) -> str:
    """A failed check in a learner's words: first what is missing (a gap still raising) or what went wrong,
    then the frames of the exercise and the check that led there, in pytest's short style."""
    error = excinfo.value
    gap = GAP.fullmatch(str(error)) if isinstance(error, NotImplementedError) else None
    if gap:
        number, topic, name, rest = gap.groups()
        where = excinfo.traceback[-1]
        headline = (f"{stem}: `{name}`{rest} is not implemented yet ({number}, {topic}): fill in its body at "
                    f"exercises/{Path(where.path).name}:{where.lineno + 1}")
    else:  # an assert of the check says what is wrong; another error is named by its type too
        first = str(error).strip().splitlines()[:1]
        kind = "" if isinstance(error, AssertionError) and first else f"{type(error).__name__}: "
        headline = f"{stem}: {kind}{first[0] if first else ''}".rstrip(": ")
    trace = excinfo.getrepr(style="short", tbfilter=_exercise_frames)
    return f"{headline}\n(what the check asks: check_{stem} in exercises/checks.py)\n\n{trace}"


def _exercise_frames(excinfo):
    """The traceback's frames in the exercise files and the checks, without pytest's, the chapters' or TVM's
    (all of them when none is there)."""
    mine = excinfo.traceback.filter(
        lambda entry: Path(entry.path).parent == HERE and Path(entry.path).name != "test_tasks.py")
    return mine if len(mine) else excinfo.traceback
