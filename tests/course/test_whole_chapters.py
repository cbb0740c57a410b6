"""chapters/whole/: each chapter as one runnable file holding the whole compiler as of that chapter
(scripts/flatten_chapters.py), current, runnable alone, and printing what its chapter prints."""
import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402
import flatten_chapters  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))
# Chapter 15 tunes with MetaSchedule and chapter 27 times its configs: their measured times, so their
# outputs, differ from run to run; their whole files are checked by importing them.
SLOW = {"15_meta_schedule", "27_autotune"}


def test_the_whole_files_are_current():
    """After changing a chapter: python scripts/flatten_chapters.py"""
    expected = flatten_chapters.whole_files()
    assert sorted(p.name for p in flatten_chapters.WHOLE.glob("*.py")) == sorted(p.name for p in expected)
    stale = [p.name for p, text in expected.items() if p.read_text() != text]
    assert not stale, f"run python scripts/flatten_chapters.py ({stale})"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_whole_file_has_one_jit_and_one_code_generator(path):
    tree = ast.parse((flatten_chapters.WHOLE / path.name).read_text())
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    assert classes.count("JIT") == 1
    assert classes.count("CodeGenerator") == (path.name >= "04")
    for node in tree.body:  # the only other chapter it may load is for its demo's comparison
        if isinstance(node, ast.ClassDef):
            assert all(not re.match(r"ch\d\d\.", ast.unparse(b)) for b in node.bases)


def normalised(output):
    """What may differ between two runs of the same program from two files: object addresses, the
    file and line a refusal points at, random inputs."""
    output = re.sub(r"0x[0-9a-f]+", "0x?", output)
    output = re.sub(r"\S*chapters/(whole/)?(\d\d_\w+\.py):\d+", r"\2:?", output)
    output = re.sub(r"\bline \d+", "line ?", output)
    return re.sub(r"-?\d+\.\d{4}\b", "?", output)


@pytest.mark.parametrize("path", [p for p in CHAPTERS if p.stem not in SLOW], ids=lambda p: p.stem)
def test_a_whole_file_runs_alone_and_prints_what_its_chapter_prints(path):
    whole = build_book.run_chapter(flatten_chapters.WHOLE / path.name, ROOT)
    assert whole.returncode == 0, whole.stderr[-3000:]
    chapter = build_book.run_chapter(path, ROOT)  # shared with tests/course/test_chapters.py in one session
    assert normalised(whole.stdout) == normalised(chapter.stdout)


def test_the_slow_whole_files_load(tmp_path):
    """Both imported by one fresh Python, run as the chapters are (tests/chapter_zygote.py)."""
    script = tmp_path / "load_slow.py"
    script.write_text(f"import importlib, sys\nsys.path.insert(0, {str(flatten_chapters.WHOLE)!r})\n"
                      f"for stem in {sorted(SLOW)!r}:\n    assert importlib.import_module(stem).JIT.CodeGenerator\n"
                      "print('loaded')\n")
    result = build_book.run_chapter(script, tmp_path)
    assert result.returncode == 0 and result.stdout == "loaded\n", result.stderr[-3000:]


def write(folder, name, text):
    (folder / name).write_text(text)


def test_fold_keeps_the_version_super_calls_under_a_name_of_its_own(tmp_path, monkeypatch):
    write(tmp_path, "01_a.py", '# Chapter 01 - a\n\n\nclass JIT:\n    """one"""\n\n    def run(self):\n'
          '        return 1\n\n    def keep(self):\n        return "kept"\n\n\njit = JIT\n\n\n'
          'if __name__ == "__main__":\n    assert JIT().run() == 1\n')
    write(tmp_path, "02_b.py", '# Chapter 02 - b\nimport importlib\n\nch01 = importlib.import_module("01_a")\n\n\n'
          'class JIT(ch01.JIT):\n    # one more\n    def run(self):\n        return super().run() + 1\n\n'
          '    def other(self):\n        return self.keep()\n\n\nif __name__ == "__main__":\n'
          '    print(JIT().run(), JIT().other())\n')
    monkeypatch.setattr(flatten_chapters, "CHAPTERS", tmp_path)
    text = flatten_chapters.fold(tmp_path / "02_b.py")
    tree = ast.parse(text)
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["JIT"]
    methods = [n.name for n in tree.body[0].body if isinstance(n, ast.FunctionDef)]
    assert methods == ["_run_ch01", "run", "other", "keep"]  # new code follows the code it follows in its chapter
    assert "self._run_ch01() + 1" in text and "# one more" in text and "importlib" not in text
    printed = []
    exec(compile(text, "02_b.py", "exec"), {"__name__": "__main__", "print": lambda *a: printed.append(a)})
    assert printed == [(2, "kept")]
