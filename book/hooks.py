"""MkDocs hook (book/mkdocs.yml, `hooks:`): runs the ```python blocks of the user guide (guide/*.md)
while the book is built, so that the reference cannot show code that no longer works.

Each page's blocks run in order in one namespace of their own (a module named after the page), in the
building process (they are written for the CPU: the book builds without a GPU), with their source
registered under the page's name so that @jit can read it and errors point at the page's lines. What a block prints comes after it on the page, as a text block. A block that raises
fails the build with a GuideBlockError naming the page and the block's first line. Blocks that must not
run (shell commands, output) take another fence: ```sh, ```text.
"""
from __future__ import annotations

import contextlib
import io
import linecache
import re
import sys
import time
import traceback
import types

GUIDE = "guide/"
BLOCK = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*python\b[^\n]*\n(?P<code>.*?)^(?P=fence)[ \t]*$",
                   re.MULTILINE | re.DOTALL)
seconds: dict[str, float] = {}   # page -> the time its blocks took, for the build's summary line


class GuideBlockError(RuntimeError):
    """A Python block of a guide page raised while the book was built."""


def on_page_markdown(markdown: str, page, **_) -> str | None:
    if not page.file.src_uri.startswith(GUIDE):
        return None
    return run_blocks(markdown, page.file.src_uri)


def on_post_build(**_) -> None:
    if seconds:
        print(f"guide: ran the Python blocks of {len(seconds)} pages in {sum(seconds.values()):.1f} s "
              f"(slowest: {max(seconds, key=seconds.get)}, {max(seconds.values()):.1f} s)")
        seconds.clear()


def run_blocks(markdown: str, page: str) -> str:
    """Run the page's Python blocks in one namespace; the page with each block's output after it."""
    name = "guide_" + re.sub(r"\W", "_", page.removeprefix(GUIDE).removesuffix(".md"))
    module = types.ModuleType(name)
    module.__file__ = page
    sys.modules[name] = module     # as a script's __main__ is: torch and pickle look functions up by module
    blocks = list(BLOCK.finditer(markdown))
    _register_source(markdown, blocks, page)
    start, parts, end = time.perf_counter(), [], 0
    try:
        for match in blocks:
            printed = run_block(match.group("code"), markdown[:match.start("code")].count("\n"), page, module)
            parts += [markdown[end:match.end()], _text_block(printed)]
            end = match.end()
    finally:
        del sys.modules[name]
        seconds[page] = time.perf_counter() - start
    return "".join(parts) + markdown[end:]


def run_block(code: str, line_offset: int, page: str, module: types.ModuleType) -> str:
    """Run one block as lines `line_offset + 1...` of `page`; what it printed (stdout and stderr)."""
    source = "\n" * line_offset + code
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            exec(compile(source, page, "exec"), module.__dict__)
    except BaseException as error:   # SystemExit and KeyboardInterrupt from a block are failures too
        if isinstance(error, KeyboardInterrupt):
            raise
        first = next((line.strip() for line in code.splitlines() if line.strip()), "")
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == page]
        raise GuideBlockError(f"{page}:{lines[-1] if lines else line_offset + 1}: the Python block that starts "
                              f"`{first}` raised {type(error).__name__}: {error}") from error
    return printed.getvalue()


def _register_source(markdown: str, blocks: list, page: str) -> None:
    """The page's Python, at its lines on the page (the rest blank), as `page`'s source for inspect: @jit
    reads a function's source there, and errors quote the page's lines."""
    lines = ["\n"] * (markdown.count("\n") + 1)
    for match in blocks:
        first = markdown[:match.start("code")].count("\n")
        code = match.group("code").splitlines(keepends=True)
        lines[first:first + len(code)] = code
    linecache.cache[page] = (sum(map(len, lines)), None, lines, page)


def _text_block(printed: str) -> str:
    """What a block printed, as a text block (a fence longer than any run of backticks in it)."""
    if not printed.strip():
        return ""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", printed)), default=0))
    return f'\n\n{fence}text title="printed"\n{printed.rstrip()}\n{fence}'
