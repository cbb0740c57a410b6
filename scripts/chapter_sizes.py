"""The chapter-size table of chapters/README.md: code lines per chapter, of its whole file
(chapters/whole/, scripts/flatten_chapters.py) and the diff of the whole files against its base's, and
for the exercise chapters (14-22) the size of the answer, the diff between the starter exercises/<name>.py and the chapter.

    python scripts/chapter_sizes.py           # print the table
    python scripts/chapter_sizes.py --write   # put it into chapters/README.md, between its markers

tests/course/test_chapter_sizes.py checks that the README's table is current.
"""
import argparse
import ast
import difflib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "chapters" / "README.md"
BEGIN, END = "<!-- chapter-sizes:begin -->", "<!-- chapter-sizes:end -->"


def code_lines(text):
    """Lines that are neither blank nor comments (docstrings count: they are part of the code's text)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def base_of(path):
    """The chapter a chapter builds on: the one its code imports (none for chapter 01)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
            name = ast.literal_eval(node.args[0])
            if name[:2].isdigit():
                return name
    return None


def answer_size(chapter):
    """(lines added, lines removed) from the starter to the chapter, or None without a starter."""
    starter = ROOT / "exercises" / chapter.name
    if not starter.exists():
        return None
    diff = difflib.unified_diff(starter.read_text().splitlines(), chapter.read_text().splitlines(), lineterm="", n=0)
    changed = [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return sum(line[0] == "+" for line in changed), sum(line[0] == "-" for line in changed)


def whole_diff(chapter, base):
    """Lines changed (+ and -) from the whole file of `base` to the whole file of `chapter` (chapters/whole/)."""
    if base is None:
        return ""
    old, new = (ROOT / "chapters" / "whole" / f"{base}.py", ROOT / "chapters" / "whole" / chapter.name)
    if not (old.exists() and new.exists()):
        return ""
    diff = difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines(), lineterm="", n=0)
    return str(sum(1 for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))))


def table():
    rows = ["| chapter | builds on | code lines | whole file (code lines) | diff of the whole files | "
            "the answer: `diff exercises/<file> chapters/<file>` |",
            "|---|---|---:|---:|---:|---|"]
    total = 0
    chapters = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))
    for chapter in chapters:
        lines = code_lines(chapter.read_text())
        total += lines
        base = base_of(chapter)
        answer = answer_size(chapter)
        answer_text = "" if answer is None else f"+{answer[0]} / -{answer[1]} lines"
        whole = ROOT / "chapters" / "whole" / chapter.name
        whole_lines = code_lines(whole.read_text()) if whole.exists() else ""
        rows.append(f"| `{chapter.name}` | {f'`{base}`' if base else '-'} | {lines} | {whole_lines} | "
                    f"{whole_diff(chapter, base)} | {answer_text} |")
    rows.append(f"| all {len(chapters)} | | {total} | | | |")
    return "\n".join(rows)


def with_table(readme_text):
    head, rest = readme_text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update chapters/README.md")
    if parser.parse_args().write:
        README.write_text(with_table(README.read_text()))
    else:
        print(table())


if __name__ == "__main__":
    main()
