"""scripts/chapter_sizes.py and the chapter-size table it writes into chapters/README.md."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("chapter_sizes", ROOT / "scripts" / "chapter_sizes.py")
chapter_sizes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chapter_sizes)


def test_the_readme_table_is_current():
    """After changing a chapter or a starter: python scripts/chapter_sizes.py --write"""
    readme = chapter_sizes.README.read_text()
    assert chapter_sizes.with_table(readme) == readme


def test_code_lines_leave_out_blank_lines_and_comments():
    assert chapter_sizes.code_lines("# a comment\n\nx = 1  # counted\n    # indented comment\n'''doc'''\n") == 2


def test_the_exercise_chapters_build_on_13_and_have_an_answer_column():
    """The tutorial's exercises (14-21) on chapter 13; the course's exercises 9 and 10 (22, 23) on chapter 18;
    the block chapters on chapter 21 (24), then each on the one before."""
    rows = {line.split("|")[1].strip(" `"): line for line in chapter_sizes.table().splitlines()[2:-1]}
    assert len(rows) == len(list((ROOT / "chapters").glob("[0-9][0-9]_*.py")))
    for name, row in rows.items():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if name >= "14":
            blocks = {"24": "`21_tir_backend`", "25": "`24_programs`", "26": "`25_block_reductions`",
                      "27": "`26_dot_tiles`"}
            base = blocks.get(name[:2]) or ("`18_library_calls`" if name >= "22" else "`13_fusion`")
            assert cells[1] == base and cells[5].startswith("+"), row
        else:
            assert cells[5] == "", row
        assert int(cells[3]) > int(cells[2]) or name == "01_jit.py", row  # the whole file holds its bases
        assert cells[4].isdigit() or name == "01_jit.py", row


def test_answer_size_counts_the_diff_from_the_starter(tmp_path, monkeypatch):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "chapters" / "99_x.py").write_text("a\nb\nc\n")
    (tmp_path / "exercises" / "99_x.py").write_text("a\nstub\n")
    monkeypatch.setattr(chapter_sizes, "ROOT", tmp_path)
    assert chapter_sizes.answer_size(tmp_path / "chapters" / "99_x.py") == (2, 1)
    assert chapter_sizes.answer_size(tmp_path / "chapters" / "98_none.py") is None
