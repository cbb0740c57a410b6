"""Reading a Python function's source and parsing it, keeping the way back to file lines."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from ..core.errors import CompilationError, SourceMap


@dataclass
class ParsedFunction:
    fn: object
    source: str               # dedented source of the def (decorators included)
    tree: ast.FunctionDef
    source_map: SourceMap

    @property
    def name(self) -> str:
        return self.tree.name


def environment(fn) -> dict:
    """The names a function reads besides its own: its globals, and its closure's (which win)."""
    closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__))) if fn.__closure__ else {}
    return {**fn.__globals__, **closure}


def parse_function(fn) -> ParsedFunction:
    """Parse `fn`'s own source; a function without readable source is a CompilationError."""
    name = getattr(fn, "__name__", repr(fn))
    filename = getattr(getattr(fn, "__code__", None), "co_filename", "<unknown>")
    if not inspect.isfunction(fn):
        raise CompilationError(f"@jit takes a Python function, got {type(fn).__name__} {name!r}", filename)
    if name == "<lambda>":
        raise CompilationError("@jit cannot compile a lambda: write it as a `def` function in a file or notebook",
                               filename, fn.__code__.co_firstlineno)
    try:
        lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise CompilationError(
            f"cannot read the source of '{name}' (defined in {filename}); @jit needs functions defined in a "
            "file or a notebook cell, not built by exec() or typed into a bare interpreter", filename) from None
    raw = "".join(lines)
    source = textwrap.dedent(raw)
    indent = len(lines[0]) - len(lines[0].lstrip()) if source != raw else 0
    source_map = SourceMap(filename, lines, first_line, indent)
    try:
        module = ast.parse(source)
    except SyntaxError as e:  # e.g. a def that is only part of a larger expression
        raise CompilationError(f"cannot parse the source of '{name}': {e.msg}", filename, first_line) from None
    defs = [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1 or defs[0].name != name:
        raise CompilationError(f"cannot find the `def {name}` in its source", filename, first_line)
    tree = defs[0]
    if isinstance(tree, ast.AsyncFunctionDef):
        raise source_map.error(tree, "@jit cannot compile an `async def` function")
    return ParsedFunction(fn, source, tree, source_map)
