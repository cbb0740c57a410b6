"""Build the babytriton book: the chapters with what they print and what each adds to the chapter it
builds on, and the executed notebooks with their IR, SVG graphs and plots, as one static site.

    python scripts/build_book.py            # -> build/book/site/index.html (opens from the file system)
    python scripts/build_book.py --serve    # builds it, then serves it on http://127.0.0.1:8000/

It runs every chapter (capturing its output), executes every notebook (or takes its stored executed
copy from book/executed/, see `--store`), writes Markdown pages for the chapters and copies of the
executed notebooks into build/book/docs/ beside book/docs/, and builds them with MkDocs and
mkdocs-jupyter (config: book/mkdocs.yml). `--store` executes everything here and keeps the executed
notebooks and the chapters' output in book/executed/, to be committed: run it on a GPU machine and the
book shows the GPU cells' real output; a stored copy is used only while its source is unchanged.
`--store-only` stores them without building the book and without Jupyter where it is missing (the GPU
machine has none): scripts/store_executions.py.

tests/course/test_chapters.py and tests/course/test_notebooks.py run the chapters and notebooks through
`run_chapter` and `execute_notebook` below, which remember their results for the process, so a test
session runs each once and tests/course/test_book.py builds the book from the same runs.
"""
from __future__ import annotations

import argparse
import ast
import copy
import datetime
import difflib
import functools
import hashlib
import http.server
import logging
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = ROOT / "notebooks"
BOOK = ROOT / "book"
STORED = BOOK / "executed"
OUT = ROOT / "build" / "book"
CHAPTER_TIMEOUT = 300
NOTEBOOK_TIMEOUT = 600
RUNS_ENV = "BABYTRITON_BOOK_RUNS"  # see _shared: a test session's runs, shared by its processes


# --------------------------------------------------------------------------------------------------
# running: once per process (the tests and the book share the runs)
# --------------------------------------------------------------------------------------------------

_chapter_runs: dict = {}
_notebook_runs: dict = {}


class BookError(RuntimeError):
    """A chapter or notebook that the book runs did not finish: the message names it and what to do."""


def shown(path: Path) -> str:
    """A path as a command run from the repository's root names it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def timed_out(path: Path, seconds: float) -> BookError:
    """The error for a chapter or notebook stopped after `seconds`: which one, and how to store its execution."""
    path, name = Path(path), shown(path)
    look = f"python {name}" if path.suffix == ".py" else f"jupyter lab {name}"
    return BookError(f"{name} did not finish in {seconds:.0f} s and was stopped. The book runs what has no current "
                     "execution stored in book/executed/ (everything, with --fresh): store it where it runs in time, "
                     f"`python scripts/store_executions.py {name} --timeout 3600` (on the GPU machine if it uses a "
                     f"GPU), or see where it stalls: `{look}`")


def progress(path: Path, what: str):
    """One line of the build's progress: which chapter or notebook it reuses or runs, and how long it took."""
    print(f"{shown(path)}: {what}", flush=True)


def run_chapter(path: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run a chapter as a reader does (`python chapters/NN_x.py` in a fresh Python); `.seconds` is its
    wall time. Remembered per (path, cwd) for the rest of the process (and a test session's, `_shared`)."""
    path, cwd = Path(path).resolve(), Path(cwd).resolve()
    if (path, cwd) not in _chapter_runs:
        _chapter_runs[(path, cwd)] = _shared("chapter", path, cwd, lambda: _run_chapter(path, cwd),
                                             _dump_run, _load_run)
    return _chapter_runs[(path, cwd)]


def _run_chapter(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, str(path.relative_to(cwd))], cwd=cwd, capture_output=True,
                                text=True, timeout=CHAPTER_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise timed_out(path, CHAPTER_TIMEOUT) from None
    result.seconds = time.perf_counter() - start
    return result


def _dump_run(run: subprocess.CompletedProcess) -> str:
    return json.dumps({"args": run.args, "returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr,
                       "seconds": run.seconds})


def _load_run(text: str) -> subprocess.CompletedProcess:
    data = json.loads(text)
    run = subprocess.CompletedProcess(data["args"], data["returncode"], data["stdout"], data["stderr"])
    run.seconds = data["seconds"]
    return run


def _shared(kind: str, path: Path, cwd: Path, compute, dump, load):
    """`compute()`, kept in the folder $BABYTRITON_BOOK_RUNS names for the other processes of a test session
    (tests/conftest.py: its xdist workers, which would each run a chapter again): keyed by where it runs and
    the sources it may read (every file of its kind beside it), and locked, so a second process waits for
    the first one's run instead of running it too. Without the variable, simply `compute()`."""
    folder = os.environ.get(RUNS_ENV)
    if not folder:
        return compute()
    import fcntl
    sources = "\0".join(p.read_text() for p in sorted(path.parent.glob("*" + path.suffix)))
    key = hashlib.sha256(f"{kind}\0{path}\0{cwd}\0{sources}".encode()).hexdigest()[:20]
    record = Path(folder) / f"{kind}-{path.stem}-{key}.json"
    with open(record.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            return load(record.read_text())
        result = compute()
        partial = record.with_suffix(".partial")
        partial.write_text(dump(result))
        partial.replace(record)
        return result


def execute_notebook(path: Path, cwd: Path | None = None):
    """Execute a notebook top to bottom in a real Jupyter kernel (nbclient raises on the first error),
    with a disk cache of its own (so compile times are cold ones); remembered for the process. The
    caller must not change the notebook it gets (copy it first); a test session's processes share it (`_shared`)."""
    import nbformat
    path = Path(path).resolve()
    cwd = Path(cwd).resolve() if cwd else path.parent
    if (path, cwd) not in _notebook_runs:
        _notebook_runs[(path, cwd)] = _shared("notebook", path, cwd, lambda: _execute_notebook(path, cwd),
                                              nbformat.writes, lambda text: nbformat.reads(text, as_version=4))
    return _notebook_runs[(path, cwd)]


def _execute_notebook(path: Path, cwd: Path):
    import nbclient
    import nbformat
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="babytriton-book-cache-") as cache:
        env = {**os.environ, "BABYTRITON_CACHE_DIR": cache}
        client = nbclient.NotebookClient(nb, timeout=NOTEBOOK_TIMEOUT, kernel_name="python3",
                                         resources={"metadata": {"path": str(cwd)}})
        start = time.perf_counter()
        try:
            client.execute(env=env)
        except nbclient.exceptions.CellTimeoutError:
            raise timed_out(path, NOTEBOOK_TIMEOUT) from None   # a cell ran longer than that
        nb.metadata["babytriton_book"] = {"seconds": round(time.perf_counter() - start, 1)}
    return nb


# --------------------------------------------------------------------------------------------------
# chapters
# --------------------------------------------------------------------------------------------------

def chapter_files() -> list[Path]:
    return sorted(CHAPTERS.glob("[0-9][0-9]_*.py"))


def imported_modules(tree: ast.AST):
    """Every module a file imports, by statement or by `importlib.import_module("...")`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.module or ""
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module")
              and node.args and isinstance(node.args[0], ast.Constant)):
            yield node.args[0].value


def bases(path: Path) -> list[Path]:
    """The chapters a chapter builds on: those it imports (chapter N imports the one it extends)."""
    stems = {p.stem: p for p in chapter_files()}
    imported = imported_modules(ast.parse(path.read_text()))
    return [stems[name] for name in dict.fromkeys(imported) if name in stems and name != path.stem]


def title_of(path: Path) -> str:
    """`# Chapter 07 - assignment, ...` -> `assignment, ...`."""
    first = path.read_text().splitlines()[0]
    match = re.match(r"#\s*Chapter\s+\d+\s*[-–—:]\s*(.*)", first)
    return match.group(1).strip() if match else path.stem


def opening_comment(path: Path) -> str:
    """The comment block a chapter opens with (after its title line), as Markdown paragraphs and lists."""
    lines = []
    for line in path.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[1:])
    blocks, current = [], []
    for line in lines:
        text = line.strip()
        item = re.match(r"(-|\*|\d+\.)\s+", text)
        if not text or item:
            if current:
                blocks.append(current)
            current = [] if not text else [("- " if item.group(1) in "-*" else item.group(1) + " ")
                                           + _escape(text[item.end():])]
        else:
            current.append(_escape(text))
    if current:
        blocks.append(current)
    paragraphs = []
    for block in blocks:
        text = " ".join(block)
        is_item = re.match(r"(- |\d+\. )", text)
        if is_item and paragraphs and paragraphs[-1][1]:
            paragraphs[-1] = (paragraphs[-1][0] + "\n" + text, True)   # the next item of the same list
        else:
            paragraphs.append((text, bool(is_item)))
    return "\n\n".join(text for text, _ in paragraphs)


def _escape(text: str) -> str:
    """Markdown's emphasis and HTML characters escaped outside `code` spans (a comment is plain text)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else re.sub(r"([*_<>\[\]\\])", r"\\\1", part) for part in parts)


def fenced(text: str, language: str = "") -> str:
    """A code block whose fence is longer than any run of backticks in the text."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def chapter_diff(base: Path, path: Path, folder: str = "chapters") -> str:
    return "\n".join(difflib.unified_diff(base.read_text().splitlines(), path.read_text().splitlines(),
                                          f"{folder}/{base.name}", f"{folder}/{path.name}", lineterm=""))


def whole_sections(path: Path, chapter_bases: list[Path]) -> list[str]:
    """The compiler as of the chapter in one file (chapters/whole/, scripts/flatten_chapters.py), and
    its diff from the whole file of the chapter it builds on: the lesson in the context of all of it."""
    whole = ROOT / "chapters" / "whole" / path.name
    if not whole.exists():
        return []
    parts = []
    for base in chapter_bases:
        diff = chapter_diff(ROOT / "chapters" / "whole" / base.name, whole, "chapters/whole")
        parts.append(f"## The whole compiler: what changed since {base.name[:2]}\n\n`chapters/whole/` holds "
                     "each chapter with the chapters it builds on folded in; this is the diff of the two "
                     "whole files.\n\n" + fenced(diff, "diff"))
    parts.append(f"## The whole compiler as of {path.name[:2]}\n\n`python chapters/whole/{path.name}` "
                 "prints what the chapter prints.\n\n" + fenced(whole.read_text(), "python"))
    return parts


def chapter_page(path: Path, run: dict) -> str:
    number = path.name[:2]
    parts = [f"# {number} · {title_of(path)}", opening_comment(path),
             f"**When this book was built,** `python chapters/{path.name}` {_how_run(run)}."]
    chapter_bases = bases(path)
    if not chapter_bases:
        parts.append("## What it adds\n\nThe first chapter: it builds on nothing, so its whole code is new.")
    for base in chapter_bases:
        diff = chapter_diff(base, path)
        added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
        parts.append(f"## What it adds to [{base.name[:2]} · {title_of(base)}]({base.stem}.md)\n\n"
                     f"Chapter {number} imports chapter {base.name[:2]} and extends it; this is the diff of the "
                     f"two files ({added} lines added, {removed} removed).\n\n" + fenced(diff, "diff"))
    parts.append("## What it prints\n\n" + fenced(run["stdout"] or "(nothing)", "text"))
    if run["stderr"].strip():
        parts.append("### and on stderr\n\n" + fenced(run["stderr"], "text"))
    parts.append("## The code\n\n" + fenced(path.read_text(), "python"))
    parts += whole_sections(path, chapter_bases)
    return "\n\n".join(parts) + "\n"


def _how_run(run: dict) -> str:
    status = "exited cleanly" if run["returncode"] == 0 else f"**exited with status {run['returncode']}**"
    return f"{status} after {run['seconds']:.1f} s on {run['machine']}"


# --------------------------------------------------------------------------------------------------
# stored executions (book/executed/): kept while their source is unchanged
# --------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def machine() -> str:
    """This machine in a few words: its CPU, and its GPUs where nvidia-smi sees any."""
    cpu = platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = ""
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=30).stdout.split("\n")
            gpus = ", ".join(dict.fromkeys(name.strip() for name in names if name.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    return f"{cpu}, {os.cpu_count()} cores" + (f", GPU: {gpus}" if gpus else ", no GPU")


def chapter_digest(path: Path) -> str:
    """A chapter's source and those of every chapter under it: what its output depends on (with babytriton
    left out: the chapters do not import it)."""
    sources, todo, seen = [], [path], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            sources.append(p.read_text())
            todo.extend(bases(p))
    return hashlib.sha256("\0".join(sources).encode()).hexdigest()


def notebook_digest(nb) -> str:
    """A notebook's cells (kind and source), without outputs: what an executed copy must match. `nb` as
    nbformat reads it or as plain JSON (sources as lists of lines), so it needs no nbformat."""
    cells = [(cell["cell_type"], "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
             for cell in nb["cells"]]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def stored_record(path: Path, stored: Path) -> Path:
    """Where `stored` keeps the execution of a chapter (chapters/NN_x.json) or of a notebook (NN_x.ipynb)."""
    return stored / "chapters" / f"{path.stem}.json" if path.suffix == ".py" else stored / path.name


def refresh_command(*paths: Path) -> str:
    """The command that stores these files' executions again."""
    return " ".join(["python scripts/store_executions.py", *map(shown, paths)])


def chapter_result(path: Path, stored: Path | None, fresh: bool) -> dict:
    record = stored_record(path, stored) if stored else None
    if not fresh and record and record.exists():
        data = json.loads(record.read_text())
        if data.get("digest") == chapter_digest(path):
            progress(path, f"output stored on {data['date']}, reused")
            return {**data, "stored": True}
    progress(path, "running it" + ("" if fresh or not record else _why_run(path, record)) + "...")
    run = run_chapter(path, ROOT)
    progress(path, f"exited with status {run.returncode} after {run.seconds:.1f} s")
    return {"stdout": run.stdout, "stderr": run.stderr, "returncode": run.returncode, "seconds": run.seconds,
            "machine": machine(), "date": datetime.date.today().isoformat(), "digest": chapter_digest(path),
            "stored": False}


def notebook_result(path: Path, stored: Path | None, fresh: bool):
    """The executed notebook for the book: the stored copy when it matches the source, else a run here."""
    import nbformat
    source = nbformat.read(path, as_version=4)
    copy_path = stored_record(path, stored) if stored else None
    if not fresh and copy_path and copy_path.exists():
        nb = nbformat.read(copy_path, as_version=4)
        info = nb.metadata.get("babytriton_book", {})
        if info.get("digest") == notebook_digest(source):
            progress(path, f"outputs stored on {info.get('date')}, reused")
            nb.metadata["babytriton_book"] = {**info, "stored": True}
            return nb
    progress(path, "executing it" + ("" if fresh or not copy_path else _why_run(path, copy_path)) + "...")
    nb = copy.deepcopy(execute_notebook(path))
    progress(path, f"executed in {nb.metadata.get('babytriton_book', {}).get('seconds', 0):.1f} s")
    nb.metadata["babytriton_book"] = {**nb.metadata.get("babytriton_book", {}), "digest": notebook_digest(source),
                                      "machine": machine(), "date": datetime.date.today().isoformat(),
                                      "stored": False}
    return nb


def _why_run(path: Path, record: Path) -> str:
    """Why the book runs a file whose execution could have been stored, and the command that stores it."""
    command = f"`{refresh_command(path)}`"
    if record.exists():
        return f", as its stored execution is stale ({command} stores it again)"
    return f", as it has no stored execution ({command} stores one)"


# --------------------------------------------------------------------------------------------------
# the book
# --------------------------------------------------------------------------------------------------

def notebook_title(nb, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+)$", cell.source, re.MULTILINE)
            if match:
                return match.group(1).strip()
    return path.stem


def banner(nb) -> str:
    info = nb.metadata["babytriton_book"]
    when = f"stored in `book/executed/` from a run of {info['date']}" if info["stored"] else \
        f"executed while this book was built ({info['date']})"
    gpu = "" if "GPU:" in info["machine"] else \
        " Without a GPU, the GPU cells generate CUDA for `sm_90` and show it, but run nothing on a GPU."
    return f"> **These outputs** were {when}, on {info['machine']}.{gpu}"


def write_pages(docs: Path, stored: Path | None, fresh: bool, store: bool) -> tuple[list, list]:
    """Writes build/book/docs: book/docs/, a page per chapter and the executed notebooks; returns the nav."""
    import nbformat
    if docs.exists():
        shutil.rmtree(docs)
    shutil.copytree(BOOK / "docs", docs)
    (docs / "chapters").mkdir()
    (docs / "notebooks").mkdir()
    chapter_nav, chapter_rows = [], []
    for path in chapter_files():
        result = chapter_result(path, stored, fresh)
        if store:
            record = stored_record(path, stored)
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({k: v for k, v in result.items() if k != "stored"}, indent=1) + "\n")
        (docs / "chapters" / f"{path.stem}.md").write_text(chapter_page(path, result))
        label = f"{path.name[:2]} · {title_of(path).replace('`', '')}"   # a nav label is plain text
        chapter_nav.append({label: f"chapters/{path.stem}.md"})
        base = ", ".join(b.name[:2] for b in bases(path)) or "—"
        chapter_rows.append(f"| [{path.name[:2]}](chapters/{path.stem}.md) | {_escape(title_of(path))} | {base} "
                            f"| {result['seconds']:.1f} s |")
    notebook_nav, notebook_rows = [], []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = notebook_result(path, stored, fresh)
        if store:
            stored.mkdir(parents=True, exist_ok=True)
            kept = copy.deepcopy(nb)
            kept.metadata["babytriton_book"].pop("stored")
            nbformat.write(kept, stored_record(path, stored))
        title = notebook_title(nb, path)
        page = copy.deepcopy(nb)
        page.cells.insert(1, nbformat.v4.new_markdown_cell(banner(nb)))
        nbformat.write(page, docs / "notebooks" / path.name)
        notebook_nav.append({title: f"notebooks/{path.name}"})
        info = nb.metadata["babytriton_book"]
        notebook_rows.append(f"| [{path.stem}](notebooks/{path.name}) | {_escape(title)} | "
                             f"{'stored, ' + info['date'] if info['stored'] else 'built here'} |")
    index = docs / "index.md"
    index.write_text(index.read_text().rstrip() + "\n\n## The chapters\n\n| # | the step | builds on | ran in |\n"
                     "|---|---|---|---|\n" + "\n".join(chapter_rows) + "\n\n## The notebooks\n\n"
                     "| notebook | title | outputs |\n|---|---|---|\n" + "\n".join(notebook_rows) + "\n")
    return chapter_nav, notebook_nav


def book_nav(listed: list, generated: dict) -> list:
    """book/mkdocs.yml's nav (its sections in reading order: the course, the user guide, the API) with the
    generated sections filled in where it lists them (`Chapters: []`), and put first where it does not."""
    named = {name for section in listed if isinstance(section, dict) for name in section}
    first = [{name: pages} for name, pages in generated.items() if name not in named]
    return first + [{name: generated.get(name, pages) for name, pages in section.items()}
                    if isinstance(section, dict) else section for section in listed]


def build(out: Path = OUT, stored: Path | None = STORED, fresh: bool = False, store: bool = False) -> Path:
    """Build the book into out/site (its pages' sources in out/docs), using the results stored in `stored`
    (or writing them there, `store`); returns the site folder."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort
    out = Path(out).resolve()
    docs, site = out / "docs", out / "site"
    chapter_nav, notebook_nav = write_pages(docs, stored, fresh, store)
    config = load_config(config_file=str(BOOK / "mkdocs.yml"), docs_dir=str(docs), site_dir=str(site))
    config.nav = book_nav(config.nav or [], {"Home": "index.md", "Chapters": chapter_nav, "Notebooks": notebook_nav})
    config.plugins.on_startup(command="build", dirty=False)
    warned = _Warnings()
    logging.getLogger("mkdocs").addHandler(warned)
    try:
        mkdocs_build(config)
    except Abort as e:   # strict mode: MkDocs stops on its warnings, which nothing printed yet
        raise BookError(f"MkDocs stopped: {e}\n" + "\n".join(warned.messages)) from None
    finally:
        logging.getLogger("mkdocs").removeHandler(warned)
        config.plugins.on_shutdown()
    return site


class _Warnings(logging.Handler):
    """MkDocs' warnings of one build, kept to say why a strict build stopped."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"  {record.levelname.lower()}: {record.getMessage()}")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):   # a line per request would bury the address to open
        pass


def book_server(site_dir: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server of the built site on 127.0.0.1:`port`, this machine only (port 0: a free one)."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as error:
        raise SystemExit(f"cannot serve the book on port {port} ({error.strerror}): pick another with --port N")


def serve(site_dir: Path, port: int = 8000):
    """Serve the built site on http://127.0.0.1:`port`/ until Ctrl-C."""
    with book_server(site_dir, port) as server:
        print(f"the book is at http://127.0.0.1:{server.server_address[1]}/ (open it in a browser; Ctrl-C stops)",
              flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default build/book): site/ and docs/")
    parser.add_argument("--fresh", action="store_true",
                        help="run every chapter and notebook here, ignoring book/executed/")
    parser.add_argument("--store", action="store_true",
                        help="run everything here and keep the results in book/executed/ (to commit: do it on a "
                             "GPU machine to show the GPU cells' real output)")
    parser.add_argument("--store-only", action="store_true",
                        help="only run everything here and keep the results (no book: no MkDocs, and no Jupyter "
                             "needed, see scripts/store_executions.py): what the GPU machine runs")
    parser.add_argument("--stored-dir", type=Path, default=STORED,
                        help="the stored results to use, or to write with --store/--store-only (default book/executed)")
    parser.add_argument("--plain", action="store_true",
                        help="with --store-only: execute the notebooks without Jupyter even where it is installed")
    parser.add_argument("--only", choices=("chapters", "notebooks"),
                        help="with --store-only: store only these (to split the work over two runs)")
    parser.add_argument("--serve", action="store_true",
                        help="after building, serve the book on http://127.0.0.1:PORT/ until Ctrl-C")
    parser.add_argument("--port", type=int, default=8000, help="with --serve: the port (default 8000)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        if args.store_only:
            import store_executions
            folder = store_executions.store(args.stored_dir, plain=args.plain, chapters=args.only != "notebooks",
                                            notebooks=args.only != "chapters")
            print(f"stored in {folder} in {time.perf_counter() - start:.0f} s")
            return 0
        site = build(args.out, stored=args.stored_dir, fresh=args.fresh or args.store, store=args.store)
    except BookError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"built {site / 'index.html'} in {time.perf_counter() - start:.0f} s")
    if args.serve:
        serve(site, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
