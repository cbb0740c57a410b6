"""The compiler at every step: for each chapter N, chapters/whole/<N's file> is one runnable file holding
the whole compiler as of N, its base chapters folded in, so `diff` of two whole files is one lesson.

    python scripts/flatten_chapters.py           # write chapters/whole/
    python scripts/flatten_chapters.py --check   # exit 1 if a whole file is not current

How it folds (with `ast` for structure, the source text for each piece, so comments stay):
- the chain is chapter N, the chapter it imports, and so on down to 01 (scripts/chapter_sizes.py base_of);
- a class that subclasses its namesake from an earlier chapter (`class JIT(ch12.JIT)`) is merged into
  it: a method or class attribute defined again replaces the earlier one in place, a new one is inserted
  where the chapter puts it, so one `JIT` and one `CodeGenerator` remain;
- a method that calls `super().m(...)` of a method it replaces keeps the earlier version under the name
  `_m_chNN` (NN: the chapter that wrote it), and calls `self._m_chNN(...)`: exactly what `super()` ran;
  `super()` of a method no chapter defined (the real base class, e.g. `ast.NodeVisitor.visit`) stays;
- top-level functions and constants are keyed by name (a later one replaces an earlier one in place);
  `chNN = importlib.import_module(...)` and aliases such as `Tensor = ch12.Tensor` are dropped, and
  `chNN.name` becomes `name` unless `name` was redefined after NN (then the demo means NN's version,
  and the whole file imports the whole file of NN, which sits beside it under the same name);
- imports are merged in order of first use; the header and the demo are chapter N's.
tests/course/test_whole_chapters.py checks that the files are current and run like their chapters.
"""
import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
WHOLE = CHAPTERS / "whole"
sys.path.insert(0, str(ROOT / "scripts"))
from chapter_sizes import base_of  # noqa: E402

CH = re.compile(r"\bch(\d\d)((?:\.ch\d\d)*)\.(\w+)")


def chain(path):
    """The chapters that `path` builds on, oldest first, ending with `path`."""
    paths = [path]
    while (base := base_of(paths[-1])) is not None:
        paths.append(CHAPTERS / f"{base}.py")
    return paths[::-1]


def chunk(lines, node, indent_floor=0):
    """The source of a statement with its decorators and the comment lines right above it."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while start > 0 and lines[start - 1].strip().startswith("#") and indent_of(lines[start - 1]) >= indent_floor:
        start -= 1
    return "\n".join(lines[start:node.end_lineno])


def indent_of(line):
    return len(line) - len(line.lstrip())


def key_of(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        accessor = [d.attr for d in node.decorator_list if isinstance(d, ast.Attribute)
                    and d.attr in ("setter", "deleter")]  # a property's setter is not its getter
        return ".".join([node.name, *accessor])
    if isinstance(node, ast.Assign):
        return ast.unparse(node.targets[0])
    if isinstance(node, ast.AnnAssign):
        return ast.unparse(node.target)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return "__doc__"
    return ast.unparse(node)


def is_chapter_alias(node):
    """`chNN = importlib.import_module(...)`, `Tensor = ch12.Tensor`, `ch12 = ch13.ch12`: only other chapters."""
    if not isinstance(node, ast.Assign):
        return False
    if isinstance(node.value, ast.Call) and ast.unparse(node.value.func).endswith("import_module"):
        return True
    names = [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)]
    return bool(names) and all(re.fullmatch(r"ch\d\d", n) for n in names)


def merge_base(node):
    """The name of the earlier chapter's class that a class extends (`ch09.JIT.CodeGenerator` -> CodeGenerator)."""
    for base in node.bases:
        text = ast.unparse(base)
        if re.match(r"ch\d\d\.", text):
            return text.rsplit(".", 1)[1]
    return None


class Item:
    """One top-level piece (or one piece of a class body) of the folded file."""

    def __init__(self, key, text, chapter, header=None, members=None):
        self.key, self.text, self.chapter = key, text, chapter
        self.header, self.members = header, members  # a merged class: its `class ...:` lines and body Items


def eager_names(node):
    """The names a statement uses when it runs (a class body, decorators, a value), not inside functions."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts = [*node.decorator_list, *node.args.defaults]
    elif isinstance(node, ast.ClassDef):
        parts = [*node.decorator_list, *node.bases, *(n for n in node.body if not isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    else:
        parts = [node]
    names = set()
    for part in parts:
        for n in ast.walk(part):
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, ast.Attribute):
                names.add(n.attr)  # ch13.JIT.CodeGenerator: this file's CodeGenerator
    return names


def place(items, cursor, item, uses=()):
    """Put `item` at `cursor` (after the items it `uses`), or replace its namesake in place when that is
    at or after the cursor (keeps unchanged code where it was); returns the next cursor."""
    if not any(old.key == item.key for old in items):
        cursor = max([cursor] + [i + 1 for i, old in enumerate(items) if old.key in uses])
    for i, old in enumerate(items):
        if old.key == item.key:
            if i >= cursor:
                items[i] = item
                return i + 1
            del items[i]
            cursor -= 1
            break
    items.insert(cursor, item)
    return cursor + 1


def merge_class(cls, node, lines, number):
    """Fold the body of `node` (chapter `number`) into the merged class `cls`."""
    defined = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    body = [n for n in node.body]
    cursor = 0
    for member in body:
        text = chunk(lines, member, indent_of(lines[member.lineno - 1]))
        for called in sorted(set(re.findall(r"super\(\)\.(\w+)", text))):
            old = next((m for m in cls.members if m.key == called), None)
            if old is None:
                continue  # the real base class's method
            if called not in defined:
                text = text.replace(f"super().{called}", f"self.{called}")
                continue
            renamed = f"_{called.strip('_')}_ch{old.chapter}"
            if old.key != renamed and not any(m.key == renamed for m in cls.members):
                old.text = re.sub(rf"\bdef {called}\(", f"def {renamed}(", old.text, count=1)
                old.key = renamed
            text = text.replace(f"super().{called}(", f"self.{renamed}(")
        new = Item(key_of(member), text, number)
        renamed_at = next((i for i, m in enumerate(cls.members) if m.key == f"_{new.key.strip('_')}_ch"
                           f"{m.chapter}" and m.chapter != number), None)
        if renamed_at is not None and not any(m.key == new.key for m in cls.members):
            cls.members.insert(renamed_at + 1, new)  # right after the version it calls
            cursor = renamed_at + 2
        else:
            cursor = place(cls.members, cursor, new)


def class_text(cls):
    return cls.header + "\n" + "\n\n".join(m.text for m in cls.members)


def fold(path):
    """The text of the whole file for chapter `path`."""
    items, imports, origin = [], [], {}
    paths = chain(path)
    for source in paths:
        number = source.name[:2]
        text = source.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        cursor = 0
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                line = ast.unparse(node)
                for alias in node.names:
                    origin.setdefault((alias.asname or alias.name).split(".")[0], number)
                if line not in imports and line != "import importlib":
                    imports.append(line)
                continue
            if is_chapter_alias(node) or (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)):
                continue
            key = key_of(node)
            origin[key] = number
            existing = next((i for i in items if i.key == key and i.members is not None), None)
            if isinstance(node, ast.ClassDef) and merge_base(node) == key and existing is not None:
                merge_class(existing, node, lines, number)
                existing.chapter = number
                cursor = place(items, cursor, existing)
            elif isinstance(node, ast.ClassDef):
                whole = chunk(lines, node).splitlines()
                end = len(whole) - (node.end_lineno - node.lineno)  # the `class` line ...
                while not re.sub(r"#.*", "", whole[end - 1]).rstrip().endswith(":"):  # ... to its colon
                    end += 1
                header = "\n".join(whole[:end])
                cls = Item(key, "", number, header=header, members=[])
                merge_class(cls, node, lines, number)
                cursor = place(items, cursor, cls, eager_names(node))
            else:
                cursor = place(items, cursor, Item(key, chunk(lines, node), number), eager_names(node))
    text = path.read_text()
    lines = text.splitlines()
    head = []
    for line in lines:
        if not line.startswith("#"):
            break
        head.append(line.replace("python chapters/", "python chapters/whole/"))
    demo = next(n for n in ast.parse(text).body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    body = [class_text(i) if i.members is not None else i.text for i in items] + [chunk(lines, demo)]
    body = "\n\n\n".join(body)

    def local(match):  # chNN.name -> name, unless the name was redefined after chapter NN
        number, name = (re.findall(r"ch(\d\d)", match.group(0)) or [match.group(1)])[-1], match.group(3)
        return name if name in origin and origin[name] <= number else match.group(0)

    body = CH.sub(local, re.sub(r"\b(ch\d\d)\.JIT\.CodeGenerator\b", r"\1.CodeGenerator", body))
    needed = sorted(set(re.findall(r"\bch(\d\d)\.", body)))
    loads = [f'ch{n} = importlib.import_module("{next(p.stem for p in paths if p.name[:2] == n)}")'
             f"  # the whole file of chapter {n}, beside this one" for n in needed]
    for n in needed:  # classes unchanged since chapter n are one class in both files (isinstance checks)
        loads += [f"ch{n}.{name} = {name}" for name, item in ((i.key, i) for i in items)
                  if item.members is not None and item.chapter <= n and name not in ("JIT", "CodeGenerator")]
    if needed:
        imports.insert(0, "import importlib")
    chapters = " -> ".join(p.name[:2] for p in paths)
    head += ["#", f"# Generated by scripts/flatten_chapters.py from chapters {chapters}: the whole compiler",
             "# as of this chapter in one file. Do not edit: edit chapters/ and run the script."]
    if loads:  # just above the demo, the only user of another chapter
        at = body.rindex("\n\n\n") + 3
        body = body[:at] + "\n".join(loads) + "\n\n\n" + body[at:]
    return "\n".join(head) + "\n" + "\n".join(imports) + "\n\n\n" + body + "\n"


def whole_files():
    """{path of the whole file: its text}, one per chapter."""
    return {WHOLE / p.name: fold(p) for p in sorted(CHAPTERS.glob("[0-9][0-9]_*.py"))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that chapters/whole/ is current")
    args = parser.parse_args()
    stale = []
    for path, text in whole_files().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.name)
            if not args.check:
                WHOLE.mkdir(exist_ok=True)
                path.write_text(text)
    print(("stale: " if args.check else "wrote: ") + (", ".join(stale) or "nothing"))
    sys.exit(1 if args.check and stale else 0)


if __name__ == "__main__":
    main()
