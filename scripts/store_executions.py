"""Store the book's executions (book/executed/) on a machine without Jupyter: the GPU machine.

    python scripts/build_book.py --store-only --stored-dir OUT/executed    # what this script's main does
    python scripts/store_executions.py chapters/15_meta_schedule.py         # refresh one chapter's
    python scripts/store_executions.py --stale                             # every one whose source changed

runs every chapter (`python chapters/NN_x.py`) and executes every notebook (or those named, or the stale
ones), and writes what the book needs into the folder: a JSON record per chapter (chapters/NN_x.json) and
each executed notebook (NN_x.ipynb), both with the machine, the date and the digest of their source,
exactly as `build_book.py --store` does. A stored execution is current while the digest of its source
matches (`stale`); the book runs a stale one again while it builds, and tests/course/test_book.py fails
on it. Nothing here needs more than the standard library and what the
notebooks import: where nbclient and ipykernel are missing (or with `--plain`), each notebook runs in
a fresh Python of its own (as a fresh kernel) through `execute_plain` below, which reads the .ipynb
with `json`, runs its code cells in order in one namespace from notebooks/ with a disk cache of its
own, and records what Jupyter would: streams, the last expression's rich reprs, `display(...)`
calls, matplotlib figures as PNG; a cell's error stops it and fails the run, as nbclient does.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import datetime
import io
import json
import linecache
import os
import pprint
import subprocess
import sys
import tempfile
import time
import tokenize
import traceback
import types
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_book  # noqa: E402  (the digests, the machine, the chapter runs: one rule with the book)

PLAIN_ENV = "BABYTRITON_BOOK_PLAIN"   # set to 1: execute as on a machine without nbclient and IPython
BACKEND = "_babytriton_book_inline"   # the matplotlib backend of the plain executor (module:// name)
MIMES = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"), ("image/svg+xml", "_repr_svg_"),
         ("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"), ("text/latex", "_repr_latex_"),
         ("application/json", "_repr_json_"))


class CellError(RuntimeError):
    """A notebook cell raised: the run stops there, as nbclient's CellExecutionError."""


def jupyter_missing() -> bool:
    """Whether notebooks must run without Jupyter: nbclient or ipykernel missing, or PLAIN_ENV set."""
    if os.environ.get(PLAIN_ENV) == "1":
        return True
    import importlib.util
    try:
        return any(importlib.util.find_spec(name) is None for name in ("nbclient", "ipykernel", "nbformat"))
    except (ImportError, ValueError):
        return True


# --------------------------------------------------------------------------------------------------
# what a cell shows: Jupyter's outputs (nbformat v4)
# --------------------------------------------------------------------------------------------------

class _Printer:
    """Enough of IPython's pretty printer for `_repr_pretty_(printer, cycle)` methods."""

    def __init__(self):
        self.parts = []

    def text(self, text):
        self.parts.append(str(text))

    def breakable(self, sep=" "):
        self.parts.append(sep)

    def pretty(self, obj):
        self.parts.append(plain_text(obj))

    @contextlib.contextmanager
    def group(self, indent=0, open="", close=""):
        self.text(open)
        yield
        self.text(close)

    @contextlib.contextmanager
    def indent(self, indent):
        yield


def plain_text(obj) -> str:
    """text/plain as IPython shows it: `_repr_pretty_`, containers broken over lines at 79 columns."""
    if not isinstance(obj, type) and callable(getattr(type(obj), "_repr_pretty_", None)):
        printer = _Printer()
        obj._repr_pretty_(printer, False)
        return "".join(printer.parts)
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        return pprint.pformat(obj, width=79, sort_dicts=False)
    return repr(obj)


def mime_bundle(obj) -> dict:
    """Every representation an object has, as Jupyter's display formatter collects them."""
    data = {}
    if not isinstance(obj, type) and callable(getattr(type(obj), "_repr_mimebundle_", None)):
        bundle = obj._repr_mimebundle_()
        data.update(bundle[0] if isinstance(bundle, tuple) else bundle or {})
    for mime, method in MIMES:
        if mime not in data and not isinstance(obj, type) and callable(getattr(type(obj), method, None)):
            value = getattr(obj, method)()
            if isinstance(value, tuple):        # (data, metadata)
                value = value[0]
            if value is not None:
                data[mime] = value
    if _is_figure(obj) and "image/png" not in data:
        data["image/png"] = _figure_png(obj)
    for mime, value in data.items():
        if isinstance(value, bytes):
            data[mime] = base64.b64encode(value).decode("ascii") if mime.startswith("image/") else value.decode()
    data.setdefault("text/plain", plain_text(obj))
    return data


def _is_figure(obj) -> bool:
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)


def _figure_png(figure) -> bytes:
    """A figure as the inline backend draws it (PNG, cropped to what is drawn)."""
    buffer = io.BytesIO()
    figure.canvas.print_figure(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


class _Outputs:
    """A cell's outputs in order; consecutive writes to one stream join, as Jupyter's front ends show them."""

    def __init__(self):
        self.items = []

    def stream(self, name: str, text: str):
        if not text:
            return
        if self.items and self.items[-1]["output_type"] == "stream" and self.items[-1]["name"] == name:
            self.items[-1]["text"] += text
        else:
            self.items.append({"output_type": "stream", "name": name, "text": text})

    def display(self, obj, output_type="display_data", execution_count=None):
        item = {"output_type": output_type, "data": mime_bundle(obj), "metadata": {}}
        if output_type == "execute_result":
            item["execution_count"] = execution_count
        self.items.append(item)


class _Stream(io.TextIOBase):
    def __init__(self, outputs: _Outputs, name: str):
        self.outputs, self.name = outputs, name

    def writable(self):
        return True

    def write(self, text):
        self.outputs.stream(self.name, text)
        return len(text)


_current: list[_Outputs] = []


def display(*objs, **_):
    """Jupyter's `display`: each object's representations become a display_data output of the cell."""
    for obj in objs:
        _current[-1].display(obj)


class HTML:
    """`IPython.display.HTML` for the shim: its text shown as HTML."""

    def __init__(self, data=None, **_):
        self.data = data or ""

    def _repr_html_(self):
        return self.data

    def __repr__(self):
        return "<IPython.core.display.HTML object>"


class Markdown(HTML):
    def _repr_markdown_(self):
        return self.data

    _repr_html_ = None

    def __repr__(self):
        return "<IPython.core.display.Markdown object>"


class SVG(HTML):
    def _repr_svg_(self):
        return self.data

    _repr_html_ = None

    def __repr__(self):
        return "<IPython.core.display.SVG object>"


def _ipython_shim() -> dict:
    """`IPython` and `IPython.display` modules with the names notebooks import from them."""
    package = types.ModuleType("IPython", "a stand-in for IPython (scripts/store_executions.py)")
    module = types.ModuleType("IPython.display")
    module.display, module.HTML, module.Markdown, module.SVG = display, HTML, Markdown, SVG
    package.display, package.__path__ = module, []
    package.get_ipython = lambda: None              # matplotlib asks: no IPython shell runs here
    package.version_info, package.__version__ = (0, 0), "0 (the book's stand-in)"
    return {"IPython": package, "IPython.display": module}


def _backend_module() -> types.ModuleType:
    """A matplotlib backend (`module://` + BACKEND): Agg canvases, and `plt.show()` displays every open
    figure as a PNG and closes it, as matplotlib-inline does."""
    module = types.ModuleType(BACKEND)

    def __getattr__(name):
        if name == "FigureCanvas":
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            module.FigureCanvas = FigureCanvasAgg   # in vars(module): pyplot copies them into its backend
            return FigureCanvasAgg
        raise AttributeError(name)

    module.__getattr__ = __getattr__
    module.show = lambda *args, **kwargs: _flush_figures()
    return module


def _flush_figures():
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for manager in pyplot._pylab_helpers.Gcf.get_all_fig_managers():
        display(manager.canvas.figure)
    pyplot.close("all")


# --------------------------------------------------------------------------------------------------
# running the cells
# --------------------------------------------------------------------------------------------------

def _quiet(source: str) -> bool:
    """A cell whose last token is `;` shows no result (IPython's rule)."""
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT}
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]
    except (tokenize.TokenError, SyntaxError):
        return False
    return bool(tokens) and tokens[-1].string == ";"


@contextlib.contextmanager
def _fd_capture(outputs: _Outputs):
    """What C and C++ code (TVM) write to file descriptors 1 and 2 becomes the cell's streams too, as
    ipykernel forwards it."""
    saved, files = [], []
    for fd in (1, 2):
        sys.__stdout__.flush() if fd == 1 else sys.__stderr__.flush()
        file = tempfile.TemporaryFile()
        saved.append(os.dup(fd))
        files.append(file)
        os.dup2(file.fileno(), fd)
    try:
        yield
    finally:
        for fd, old, file in zip((1, 2), saved, files):
            os.dup2(old, fd)
            os.close(old)
            file.seek(0)
            outputs.stream("stdout" if fd == 1 else "stderr", file.read().decode(errors="replace"))
            file.close()


def run_cell(source: str, namespace: dict, number: int, outputs: _Outputs):
    """Run one cell's source in the namespace; its last expression's value is the cell's result."""
    filename = f"<cell {number}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for inspect, tracebacks
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
        if value is not None and not _quiet(source):
            namespace["_"] = value
            outputs.display(value, "execute_result", number)


def execute_plain(path: Path, cwd: Path | None = None) -> dict:
    """Execute a notebook without Jupyter, in this process (which it changes: run it in a fresh one, as
    `execute_in_child` does): the notebook as a dict, each code cell with its outputs and count."""
    path = Path(path).resolve()
    nb = json.loads(path.read_text())
    os.chdir(cwd or path.parent)
    sys.path.insert(0, "")
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=__builtins__, display=display)
    sys.modules["__main__"] = main
    sys.modules[BACKEND] = _backend_module()
    os.environ["MPLBACKEND"] = f"module://{BACKEND}"
    try:
        if os.environ.get(PLAIN_ENV) == "1":           # as on a machine without IPython
            raise ImportError
        import IPython.core.display_functions
        import IPython.display
        IPython.display.display = IPython.core.display_functions.display = display   # no shell to display in
    except ImportError:
        sys.modules.update(_ipython_shim())
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        count += 1
        outputs = _Outputs()
        _current.append(outputs)
        error = None
        with _fd_capture(outputs), contextlib.redirect_stdout(_Stream(outputs, "stdout")), \
                contextlib.redirect_stderr(_Stream(outputs, "stderr")):
            try:
                run_cell(source, main.__dict__, count, outputs)
                _flush_figures()                      # figures left open show under the cell
            except BaseException as err:  # noqa: BLE001  (recorded, then raised below)
                error = err
        _current.pop()
        if error is not None:
            tb = error.__traceback__                  # from the cell's own frames on, as Jupyter shows it
            while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
                tb = tb.tb_next
            lines = traceback.format_exception(type(error), error, tb or error.__traceback__)
            outputs.items.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                                  "traceback": [line.rstrip("\n") for line in lines]})
        cell["outputs"], cell["execution_count"] = outputs.items, count
        if error is not None:
            raise CellError(f"{path.name}: cell {count} raised\n{source}\n\n{''.join(lines)}")
    return nb


def _run_python(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`python argv...` in a fresh process, its output captured as text (the tests put a fork of a
    Python that has imported torch and TVM in its place: tests/chapter_zygote.py)."""
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout)


def execute_in_child(path: Path, cwd: Path | None = None, plain: bool = False) -> dict:
    """`execute_plain` in a fresh Python (as a fresh kernel) with a disk cache of its own; the notebook
    as a dict with metadata.babytriton_book.seconds. `plain`: with the IPython shim even where IPython is."""
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="babytriton-book-cache-") as cache:
        result = Path(cache) / "executed.ipynb"
        env = {**os.environ, "BABYTRITON_CACHE_DIR": cache, **({PLAIN_ENV: "1"} if plain else {})}
        start = time.perf_counter()
        try:
            run = _run_python([__file__, "--execute", str(path), "--cwd", str(cwd or path.parent), "--to", str(result)],
                              env, build_book.NOTEBOOK_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise build_book.timed_out(path, build_book.NOTEBOOK_TIMEOUT) from None
        if run.returncode != 0:
            raise CellError(f"executing {path.name} failed (status {run.returncode}):\n{run.stderr[-6000:]}")
        nb = json.loads(result.read_text())
    nb["metadata"]["babytriton_book"] = {"seconds": round(time.perf_counter() - start, 1)}
    return nb


def executed(path: Path, plain: bool) -> dict:
    """The notebook executed, by Jupyter (nbclient) unless it is missing or `plain`; as a dict."""
    if plain or jupyter_missing():
        return execute_in_child(path, plain=plain or os.environ.get(PLAIN_ENV) == "1")
    import nbformat
    return json.loads(nbformat.writes(build_book.execute_notebook(path)))


def write_notebook(nb: dict, path: Path):
    """As nbformat writes it (sorted keys, one-space indent); nbformat reads it back."""
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")


def sources(chapters: bool = True, notebooks: bool = True) -> list[Path]:
    """The files the book executes: every chapter, then every notebook (or those of one kind)."""
    return ((build_book.chapter_files() if chapters else [])
            + (sorted(build_book.NOTEBOOKS.glob("*.ipynb")) if notebooks else []))


def stored_digest(path: Path, folder: Path = build_book.STORED) -> str | None:
    """The digest of the source that the stored execution of `path` was made from (None: none stored)."""
    record = build_book.stored_record(path, folder)
    if not record.exists():
        return None
    data = json.loads(record.read_text())
    return data.get("digest") if path.suffix == ".py" else data["metadata"].get("babytriton_book", {}).get("digest")


def current_digest(path: Path) -> str:
    """A chapter's digest covers the chapters under it too; a notebook's, its cells without outputs."""
    if path.suffix == ".py":
        return build_book.chapter_digest(path)
    return build_book.notebook_digest(json.loads(path.read_text()))


def stale(folder: Path = build_book.STORED) -> dict[Path, str]:
    """Every chapter and notebook whose stored execution is missing or was made from another source, with
    a line saying so and how to refresh it (the book would run it again while it builds)."""
    found = {}
    for path in sources():
        digest = stored_digest(path, folder)
        if digest == current_digest(path):
            continue
        under = " (or a chapter under it)" if path.suffix == ".py" else ""
        why = "is missing" if digest is None else f"was stored from an older {build_book.shown(path)}{under}"
        record = build_book.shown(build_book.stored_record(path, folder))
        found[path] = f"{record} {why}: refresh it with `{build_book.refresh_command(path)}`"
    return found


def store(folder: Path, plain: bool = False, chapters: bool = True, notebooks: bool = True,
          only: list[Path] | None = None) -> Path:
    """Run every chapter and notebook here (or only those of one kind, or the files in `only`) and keep the
    results in `folder` (book/executed/'s layout), saying how long each took."""
    folder = Path(folder)
    (folder / "chapters").mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    chosen = None if only is None else {Path(p).resolve() for p in only}
    todo = [p for p in sources(chapters, notebooks) if chosen is None or p.resolve() in chosen]
    for path in [p for p in todo if p.suffix == ".py"]:
        result = build_book.chapter_result(path, None, fresh=True)   # it says what it runs, and how long
        result.pop("stored")
        if result["returncode"] != 0:   # every chapter ends on its asserts: a failed run is no record to keep
            raise CellError(f"{path.name} exited with status {result['returncode']}:\n{result['stderr'][-6000:]}")
        build_book.stored_record(path, folder).write_text(json.dumps(result, indent=1) + "\n")
    for path in [p for p in todo if p.suffix == ".ipynb"]:
        build_book.progress(path, "executing it...")
        nb = executed(path, plain)
        nb["metadata"]["babytriton_book"] = {**nb["metadata"].get("babytriton_book", {}),
                                             "digest": build_book.notebook_digest(json.loads(path.read_text())),
                                             "machine": build_book.machine(), "date": today}
        write_notebook(nb, build_book.stored_record(path, folder))
        build_book.progress(path, f"executed in {nb['metadata']['babytriton_book']['seconds']:.1f} s")
    return folder


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="only these chapters (chapters/NN_x.py) and "
                        "notebooks (notebooks/NN_x.ipynb); default: every one")
    parser.add_argument("--stale", action="store_true",
                        help="only those whose stored execution is missing or older than their source")
    parser.add_argument("--timeout", type=int, help="seconds a chapter or a notebook's cell may run (default "
                        f"{build_book.CHAPTER_TIMEOUT} and {build_book.NOTEBOOK_TIMEOUT})")
    parser.add_argument("--stored-dir", type=Path, default=build_book.STORED,
                        help="where to write the records (default book/executed)")
    parser.add_argument("--plain", action="store_true", help="execute the notebooks without Jupyter even "
                        "where it is installed (as on the GPU machine)")
    parser.add_argument("--only", choices=("chapters", "notebooks"), help="store only these (in two runs)")
    parser.add_argument("--execute", type=Path, help=argparse.SUPPRESS)   # the child of execute_in_child
    parser.add_argument("--cwd", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.execute:
        try:
            nb = execute_plain(args.execute, args.cwd)
        except CellError as err:
            print(err, file=sys.stderr)
            return 1
        write_notebook(nb, args.to)
        return 0
    unknown = [str(p) for p in args.paths if Path(p).resolve() not in {s.resolve() for s in sources()}]
    if unknown:
        parser.error(f"not a chapter or notebook of the book: {', '.join(unknown)} "
                     "(name chapters/NN_x.py or notebooks/NN_x.ipynb)")
    if args.timeout:
        build_book.CHAPTER_TIMEOUT = build_book.NOTEBOOK_TIMEOUT = args.timeout
    only = list(stale(args.stored_dir)) if args.stale else (args.paths or None)
    if only == []:
        print(f"every execution stored in {args.stored_dir} is current")
        return 0
    start = time.perf_counter()
    try:
        store(args.stored_dir, plain=args.plain, chapters=args.only != "notebooks",
              notebooks=args.only != "chapters", only=only)
    except build_book.BookError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"stored in {args.stored_dir} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
