"""The one error type users see from the compiler, how it points at their source, and keeping
TVM's own C++ logging out of their view."""
from __future__ import annotations

import ast
import contextlib
import os
import sys
import threading


def debug_enabled() -> bool:
    """`BABYTRITON_DEBUG=1` keeps the raw cause (TVM's own exception) attached to our errors."""
    return os.environ.get("BABYTRITON_DEBUG", "") not in ("", "0")


_STDERR_LOCK = threading.Lock()
_stderr_state = {"users": 0, "saved": None}


@contextlib.contextmanager
def quiet_stderr():
    """Silence the process's C-level stderr (fd 2), where TVM's C++ logging writes. Threads
    compiling at once share one redirection: the first in makes it, the last out restores fd 2."""
    with _STDERR_LOCK:
        if _stderr_state["users"] == 0:
            sys.stderr.flush()
            _stderr_state["saved"] = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        _stderr_state["users"] += 1
    try:
        yield
    finally:
        with _STDERR_LOCK:
            _stderr_state["users"] -= 1
            if _stderr_state["users"] == 0:
                sys.stderr.flush()
                os.dup2(_stderr_state["saved"], 2)
                os.close(_stderr_state["saved"])


def quiet_tvm():
    """TVM's C++ warnings (dead code before FuseOps, pow exponents, abandoned builders) speak of
    TVM's internals, not the user's code: silenced, unless BABYTRITON_DEBUG=1."""
    return contextlib.nullcontext() if debug_enabled() else quiet_stderr()


class CompilationError(Exception):
    """A construct in a @jit function that the compiler cannot take, located in the user's file.

    `str(err)` is `path:line:col: error: message`, then the source line and a caret under the column.
    """

    def __init__(self, message: str, filename: str = "<unknown>", lineno: int | None = None,
                 col: int | None = None, source_line: str | None = None, end_col: int | None = None):
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        self.end_col = end_col
        super().__init__(self._render())

    def _render(self) -> str:
        if self.lineno is None:
            return f"{self.filename}: error: {self.message}"
        head = f"{self.filename}:{self.lineno}:{(self.col or 0) + 1}: error: {self.message}"
        if self.source_line is None:
            return head
        line = self.source_line.rstrip("\n")
        col = self.col or 0
        width = 1
        if self.end_col is not None and self.end_col > col:
            width = min(self.end_col, len(line)) - col
        return f"{head}\n    {line}\n    {' ' * col}^{'~' * max(width - 1, 0)}"


class Diagnostic(Exception):
    """A user-facing problem raised deep in the code generator, before it knows the source location.

    The visitor turns it into a CompilationError at the innermost AST node being compiled.
    """


class PathDependent(Diagnostic):
    """A value whose kind would depend on the path a run-time `if` takes: specialising a number the
    code reads (codegen/specialise.py) would only hide it, changing the result's dtype on one path."""


class SourceMap:
    """Maps AST nodes of a dedented function body back to lines and columns of the user's file."""

    def __init__(self, filename: str, lines: list[str], first_line: int, indent: int):
        self.filename = filename
        self.lines = lines            # the function's source lines as they are in the file
        self.first_line = first_line  # file line number of lines[0]
        self.indent = indent          # columns removed by dedenting

    def error(self, node: ast.AST | None, message: str) -> CompilationError:
        if node is None or not hasattr(node, "lineno"):
            return CompilationError(message, self.filename, self.first_line, 0, self._line(0))
        col = node.col_offset + self.indent
        end_col = None
        if getattr(node, "end_lineno", None) == node.lineno and node.end_col_offset is not None:
            end_col = node.end_col_offset + self.indent
        return CompilationError(message, self.filename, self.file_line(node.lineno), col,
                                self._line(node.lineno - 1), end_col)

    def describe(self, node: ast.AST) -> str:
        """`file:line: source` of a node, for warnings that point at the user's code."""
        line = self._line(node.lineno - 1) if hasattr(node, "lineno") else None
        where = f"{self.filename}:{self.file_line(node.lineno)}" if hasattr(node, "lineno") else self.filename
        return f"{where}: {line.strip()}" if line else where

    def file_line(self, lineno: int) -> int:
        """The file's line number of line `lineno` (1-based) of the parsed function."""
        return self.first_line + lineno - 1

    def _line(self, rel: int) -> str | None:
        return self.lines[rel] if 0 <= rel < len(self.lines) else None
