"""The book (scripts/build_book.py): it builds, each chapter's page shows its output and its diff against
the chapter it imports, each notebook's page its outputs (IR text, SVG graphs, plots), and the pages
show them in a real browser (headless Chromium: Debian's, which the test installs with apt-get where it
is missing and the tests run as root, as in CI; elsewhere it skips, naming the command).

The chapters and notebooks run once per test session (build_book.run_chapter/execute_notebook remember
them), so with tests/course/test_chapters.py and tests/course/test_notebooks.py in the same session the book costs
only its MkDocs build and the browser.
"""
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocs_jupyter")
nbformat = pytest.importorskip("nbformat")
Image = pytest.importorskip("PIL.Image")   # matplotlib's, for the screenshots

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402
import store_executions  # noqa: E402

CHAPTERS = build_book.chapter_files()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_book.build(tmp_path_factory.mktemp("book"))


def page(site: Path, relative: str) -> str:
    return (site / relative).read_text()


def svgs(page_html: str) -> list[str]:
    """The SVG pictures a page shows (nbconvert embeds a notebook's SVG output as a data: image)."""
    return [base64.b64decode(data).decode()
            for data in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page_html)]


def text_of(page_html: str) -> str:
    """What a page says, tags and highlighting spans removed."""
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


def test_every_chapter_and_notebook_has_a_page(site):
    assert (site / "index.html").exists()
    index = text_of(page(site, "index.html"))
    for path in CHAPTERS:
        assert (site / "chapters" / f"{path.stem}.html").exists()
        assert build_book.title_of(path).replace("`", "") in index
    for path in NOTEBOOKS:
        assert (site / "notebooks" / f"{path.stem}.html").exists()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_page_shows_its_output_and_its_diff(site, path):
    shown = text_of(page(site, f"chapters/{path.stem}.html"))
    result = build_book.chapter_result(path, build_book.STORED, fresh=False)  # what the page is built from
    first_lines = [line for line in result["stdout"].splitlines() if line.strip()][:3]
    assert first_lines and all(line in shown for line in first_lines)
    bases = build_book.bases(path)      # the chapters it imports: an earlier one, except for the first
    assert all(base.name < path.name for base in bases) and (bases or path == CHAPTERS[0])
    for base in bases:
        assert f"--- chapters/{base.name}" in shown and f"+++ chapters/{path.name}" in shown
        assert f"What it adds to {base.name[:2]}" in shown
        assert f"--- chapters/whole/{base.name}" in shown and f"+++ chapters/whole/{path.name}" in shown
    assert f"The whole compiler as of {path.name[:2]}" in shown


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_prints_no_tvm_warning(path):
    assert "BlockBuilder destroyed" not in build_book.run_chapter(path, ROOT).stderr


def test_the_base_of_a_chapter_is_the_chapter_it_imports(tmp_path, monkeypatch):
    """Not the chapter numbered one less: chapter 03 here extends chapter 01."""
    (tmp_path / "01_first.py").write_text("# Chapter 01 - first\nX = 1\n")
    (tmp_path / "02_second.py").write_text("# Chapter 02 - second\nimport importlib\n"
                                           "ch01 = importlib.import_module('01_first')\n")
    (tmp_path / "03_third.py").write_text("# Chapter 03 - third\nimport importlib\nimport os\n"
                                          "ch01 = importlib.import_module('01_first')\n")
    monkeypatch.setattr(build_book, "CHAPTERS", tmp_path)
    assert build_book.bases(tmp_path / "03_third.py") == [tmp_path / "01_first.py"]
    assert build_book.bases(tmp_path / "01_first.py") == []
    diff = build_book.chapter_diff(tmp_path / "01_first.py", tmp_path / "03_third.py")
    assert "-X = 1" in diff and "+ch01 = importlib.import_module('01_first')" in diff


def test_notebook_pages_show_their_outputs(site):
    tour = text_of(page(site, "notebooks/01_tour.html"))
    assert "@R.function" in tour and "R.call_tir(cls.fused_multiply_add_tir_sigmoid_multiply_sum" in tour
    assert "_compute_(" in tour and "These outputs were" in tour
    pictures = svgs(page(site, "notebooks/02_fusion.html"))
    assert len(pictures) >= 3                               # k.graph() in each section
    assert all('class="node op"' in svg and 'class="node kernel"' in svg for svg in pictures)
    autograd = page(site, "notebooks/06_autograd.html")
    assert "def layernorm_backward(" in text_of(autograd) and "GradientFallbackWarning" in text_of(autograd)
    assert len(svgs(autograd)) >= 1                         # the backward's graph
    schedules = page(site, "notebooks/04_gpu_schedules.html")
    if (ROOT / "benchmarks" / "RESULTS.md").exists():
        assert 'src="data:image/png;base64,' in schedules  # the benchmark plot


def test_stored_executions_are_used_while_their_source_is_unchanged(tmp_path, monkeypatch):
    """`--store` keeps the executed notebook; the book shows it, and runs the notebook again once the
    notebook's source changes."""
    source = NOTEBOOKS[0]
    executed = build_book.notebook_result(source, None, fresh=True)
    stored = tmp_path / "executed"
    stored.mkdir()
    kept = nbformat.from_dict(json.loads(nbformat.writes(executed)))
    kept.metadata["babytriton_book"].update(machine="a test machine, GPU: NVIDIA H100", date="2030-01-01")
    nbformat.write(kept, stored / source.name)
    used = build_book.notebook_result(source, stored, fresh=False)
    assert used.metadata["babytriton_book"]["stored"] and "a test machine" in build_book.banner(used)
    edited = tmp_path / "notebooks" / source.name
    edited.parent.mkdir()
    nb = nbformat.read(source, as_version=4)
    nb.cells[0].source += " (edited)"
    nbformat.write(nb, edited)
    monkeypatch.setattr(build_book, "execute_notebook", lambda path, cwd=None: executed)
    rerun = build_book.notebook_result(edited, stored, fresh=False)
    assert not rerun.metadata["babytriton_book"]["stored"]


def test_a_stored_chapter_run_is_used_until_a_chapter_under_it_changes(tmp_path, monkeypatch):
    """A chapter's stored output stands while neither it nor a chapter it imports has changed."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    for path in CHAPTERS[:2]:
        (chapters / path.name).write_text(path.read_text())
    monkeypatch.setattr(build_book, "CHAPTERS", chapters)
    monkeypatch.setattr(build_book, "ROOT", tmp_path)
    second = chapters / CHAPTERS[1].name
    stored = tmp_path / "executed"
    (stored / "chapters").mkdir(parents=True)
    record = {"stdout": "printed on the GPU machine\n", "stderr": "", "returncode": 0, "seconds": 1.0,
              "machine": "a test machine, GPU: NVIDIA H100", "date": "2030-01-01",
              "digest": build_book.chapter_digest(second)}
    (stored / "chapters" / f"{second.stem}.json").write_text(json.dumps(record))
    used = build_book.chapter_result(second, stored, fresh=False)
    assert used["stored"] and used["stdout"] == "printed on the GPU machine\n"
    assert "printed on the GPU machine" in build_book.chapter_page(second, used)
    base = chapters / CHAPTERS[0].name
    base.write_text(base.read_text() + "\n# changed\n")         # the chapter under it
    rerun = build_book.chapter_result(second, stored, fresh=False)
    assert not rerun["stored"] and rerun["returncode"] == 0 and "printed on the GPU machine" not in rerun["stdout"]


def test_every_stored_execution_is_current():
    """book/executed/ holds an execution of every chapter and notebook, made from its current source: the
    book runs a stale one again while it builds (chapter 15's tuning once ran into the 300 s limit so)."""
    stale = store_executions.stale()
    if stale:
        pytest.fail("\n".join(stale.values()), pytrace=False)


def test_a_stale_or_missing_execution_is_named_with_the_command_that_stores_it(tmp_path):
    stored = tmp_path / "executed"
    (stored / "chapters").mkdir(parents=True)
    (stored / "chapters" / f"{CHAPTERS[0].stem}.json").write_text(
        json.dumps({"digest": build_book.chapter_digest(CHAPTERS[0])}))
    (stored / NOTEBOOKS[0].name).write_text(json.dumps({"metadata": {"babytriton_book": {"digest": "an old one"}}}))
    stale = store_executions.stale(stored)
    assert CHAPTERS[0] not in stale and CHAPTERS[1] in stale and NOTEBOOKS[0] in stale
    assert stale[NOTEBOOKS[0]].startswith(f"{stored / NOTEBOOKS[0].name} was stored from an older notebooks/")
    assert stale[NOTEBOOKS[0]].endswith(f"`python scripts/store_executions.py notebooks/{NOTEBOOKS[0].name}`")
    assert "is missing: refresh it with `python scripts/store_executions.py chapters/" in stale[CHAPTERS[1]]


def test_the_build_says_what_it_reuses_and_what_it_runs(tmp_path, capsys):
    stored = tmp_path / "executed"
    (stored / "chapters").mkdir(parents=True)
    record = {"stdout": "", "stderr": "", "returncode": 0, "seconds": 1.0, "machine": "a test machine",
              "date": "2030-01-01", "digest": build_book.chapter_digest(CHAPTERS[0])}
    (stored / "chapters" / f"{CHAPTERS[0].stem}.json").write_text(json.dumps(record))
    build_book.chapter_result(CHAPTERS[0], stored, fresh=False)
    build_book.chapter_result(CHAPTERS[1], stored, fresh=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"chapters/{CHAPTERS[0].name}: output stored on 2030-01-01, reused"
    assert lines[1] == (f"chapters/{CHAPTERS[1].name}: running it, as it has no stored execution "
                        f"(`python scripts/store_executions.py chapters/{CHAPTERS[1].name}` stores one)...")
    assert re.fullmatch(rf"chapters/{CHAPTERS[1].name}: exited with status 0 after \d+\.\d s", lines[2])


def test_a_chapter_that_runs_too_long_is_named_with_how_to_store_it(tmp_path, monkeypatch):
    slow = tmp_path / "99_slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(build_book, "CHAPTER_TIMEOUT", 1)
    with pytest.raises(build_book.BookError, match=r"99_slow.py did not finish in 1 s and was stopped(.|\n)*"
                                                   r"`python scripts/store_executions.py .*99_slow.py --timeout"):
        build_book.run_chapter(slow, tmp_path)


# --------------------------------------------------------------------------------------------------
# stored without Jupyter (the GPU machine: scripts/store_executions.py, `build_book.py --store-only`)
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_store(tmp_path_factory):
    """What the GPU machine's `--store-only` writes, here with Jupyter hidden: the chapters (this session's
    runs) and the notebooks executed by the plain executor, each in a fresh Python."""
    return store_executions.store(tmp_path_factory.mktemp("executed"), plain=True)


def kinds(cell) -> list:
    """What a code cell shows, by kind: its streams' names and its displays' MIME types."""
    return sorted({f"stream:{out['name']}" if out["output_type"] == "stream" else out["output_type"]
                   if out["output_type"] == "error" else mime
                   for out in cell["outputs"] for mime in out.get("data", {None: None})})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_runs_under_jupyter(path):
    """Top to bottom in a real Jupyter kernel, as a reader runs it (tests/course/test_notebooks.py says why here)."""
    nb = build_book.execute_notebook(path, path.parent)
    shown = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in shown if out.output_type == "error"]
    assert "BlockBuilder destroyed" not in "".join(out.get("text", "") for out in shown)  # no C++ noise


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_plain_executor_shows_what_jupyter_shows(plain_store, path):
    """Cell by cell, the same kinds of output as nbclient's run (text, SVG graphs, HTML, PNG plots),
    written as valid nbformat v4 with execution counts and the book's metadata."""
    plain = json.loads((plain_store / path.name).read_text())
    nbformat.validate(nbformat.from_dict(plain))
    jupyter = build_book.execute_notebook(path)
    assert [c["cell_type"] for c in plain["cells"]] == [c.cell_type for c in jupyter.cells]
    code = [(ours, theirs) for ours, theirs in zip(plain["cells"], jupyter.cells) if theirs.cell_type == "code"]
    assert [ours["execution_count"] for ours, _ in code] == list(range(1, len(code) + 1))
    for n, (ours, theirs) in enumerate(code, 1):
        assert kinds(ours) == kinds(theirs), f"cell {n}"
        assert all(out.get("text", "x") and out.get("data", "x") for out in ours["outputs"]), f"cell {n}"
    info = plain["metadata"]["babytriton_book"]
    assert info["digest"] == build_book.notebook_digest(nbformat.read(path, as_version=4))
    assert info["machine"] == build_book.machine() and info["seconds"] > 0


def test_a_book_built_from_the_plain_store_uses_it(plain_store, tmp_path):
    """The book built from the stored folder (as from book/executed/ after the GPU machine's run) shows
    those outputs, says where they came from, and runs nothing again."""
    site = build_book.build(tmp_path / "book", stored=plain_store)
    index = text_of(page(site, "index.html"))
    date = json.loads((plain_store / NOTEBOOKS[0].name).read_text())["metadata"]["babytriton_book"]["date"]
    assert index.count(f"stored, {date}") == len(NOTEBOOKS)
    for path in NOTEBOOKS:
        assert "stored in book/executed/ from a run of" in text_of(page(site, f"notebooks/{path.stem}.html"))
    assert len(svgs(page(site, "notebooks/02_fusion.html"))) >= 3
    if (ROOT / "benchmarks" / "RESULTS.md").exists():
        assert 'src="data:image/png;base64,' in page(site, "notebooks/04_gpu_schedules.html")
    for path in CHAPTERS:
        assert build_book.chapter_result(path, plain_store, fresh=False)["stored"]


def test_the_plain_executor_records_as_jupyter_does(tmp_path):
    """Streams (Python's and a C library's), the last expression's reprs (none after `;`), display(),
    figures left open and `plt.show()`, execution counts; a cell's error stops the notebook."""
    cells = ["import os\nprint('out')\nos.write(2, b'from C\\n')\n1 + 1",
             "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n{'quiet': 1};",
             "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint('after')\nplt.figure()\n"
             "plt.plot([2, 1]);",
             "raise ValueError('stop here')", "print('never')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(store_executions.CellError, match="cell 4 raised(.|\n)*ValueError: stop here"):
        store_executions.execute_in_child(path, plain=True)
    del cells[3:]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    first, second, third = store_executions.execute_in_child(path, plain=True)["cells"]
    assert first["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "out\n"},
                                {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                 "data": {"text/plain": "2"}},
                                {"output_type": "stream", "name": "stderr", "text": "from C\n"}]
    assert [out["data"]["text/html"] for out in second["outputs"]] == ["<b>bold</b>"]
    assert [out.get("name") or sorted(out["data"]) for out in third["outputs"]] == [
        ["image/png", "text/plain"], "stdout", ["image/png", "text/plain"]]
    assert base64.b64decode(third["outputs"][0]["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert third["execution_count"] == 3


def test_storing_needs_no_jupyter(monkeypatch):
    """The GPU machine has no IPython, nbformat, nbclient or MkDocs: the store's modules import none of
    them, and the store finds Jupyter missing there (its plain executor then runs the notebooks)."""
    code = ("import sys; sys.path.insert(0, 'scripts'); import store_executions; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'IPython', 'nbformat', 'nbclient', 'mkdocs'}))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
    monkeypatch.delenv(store_executions.PLAIN_ENV, raising=False)
    assert not store_executions.jupyter_missing()
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbclient" else real(name, *a))
    assert store_executions.jupyter_missing()


# --------------------------------------------------------------------------------------------------
# in a browser
# --------------------------------------------------------------------------------------------------

BROWSER_NAMES = ("chromium", "chromium-browser")
APT_INSTALL = "apt-get update && apt-get install -y chromium"   # Debian's Chromium, as root
SECTIONS = ("Course", "Chapters", "Notebooks", "User guide")    # book/mkdocs.yml's nav, as a reader sees it
PYGMENTS_KEYWORDS = {"k", "kn", "kd", "kc", "nb", "ow"}          # keyword and builtin tokens: Python highlighted
CODE_BACKGROUND = (0xf5, 0xf5, 0xf5)                             # Material's --md-code-bg-color


def find_chromium() -> str | None:
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


@pytest.fixture(scope="session")
def chromium():
    """Chromium's path: the one on PATH; else Debian's, installed with apt-get where this runs as root (CI runs
    `pip install -e ".[dev]"` and `pytest` as root, and a browser download from elsewhere fails there); else a
    skip that names the command to run."""
    found = find_chromium()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"needs Chromium: install it with `sudo sh -c '{APT_INSTALL}'`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
    for command in (["apt-get", "update", "-qq"], install):
        run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if run.returncode != 0:
            pytest.fail(f"could not install Chromium: `{' '.join(command)}` exited with status {run.returncode}:\n"
                        f"{(run.stderr or run.stdout)[-3000:]}", pytrace=False)
    return find_chromium() or pytest.fail("`apt-get install chromium` put no chromium on PATH", pytrace=False)


def shown_in_chromium(chromium: str, site: Path, relative: str, shots: Path) -> tuple[str, Path]:
    """One headless Chromium loads the page at 1280 px, as a laptop's window: its DOM after its scripts
    ran, and a screenshot of its first 1600 px."""
    shot = shots / (relative.replace("/", "_").removesuffix(".html") + ".png")
    with tempfile.TemporaryDirectory(prefix="babytriton-chromium-") as profile:
        run = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                              "--no-first-run", "--disable-background-networking", "--disable-component-update",
                              "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,1600",
                              "--virtual-time-budget=2000", f"--screenshot={shot}", "--dump-dom",
                              (site / relative).as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.exists(), f"{relative}: {run.stderr[-2000:]}"
    return run.stdout, shot


def primary_nav(loaded: str) -> str:
    """The left-hand navigation of a page as Material renders it."""
    start = loaded.find('class="md-nav md-nav--primary"')
    assert start >= 0, "no Material navigation (nav.md-nav--primary) on the page"
    return loaded[start:loaded.find('class="md-sidebar md-sidebar--secondary"', start)]


def highlighted_tokens(loaded: str) -> list[str]:
    """The Pygments classes of the spans inside the page's code blocks (Markdown's and the notebooks')."""
    blocks = re.findall(r'<div class="highlight[^"]*">\s*<pre[^>]*>(.*?)</pre>', loaded, re.DOTALL)
    return [token for block in blocks for token in re.findall(r'<span class="([a-z0-9]+)">', block)]


def widest_code(image) -> int:
    """The most pixels of code background in one row of a screenshot: how wide the code blocks are shown."""
    rows = (image.crop((0, y, image.width, y + 1)).getcolors(image.width + 1) for y in range(0, image.height, 8))
    return max(next((n for n, colour in row if colour == CODE_BACKGROUND), 0) for row in rows)


def first_guide_page(site: Path) -> str:
    """The first page of the user guide, in the navigation's order, that shows code."""
    pages = re.findall(r'href="(guide/[^"#]+\.html)"', primary_nav(page(site, "index.html")))
    assert pages, "the book's navigation has no User guide page: list book/docs/guide/*.md in book/mkdocs.yml's nav"
    with_code = [relative for relative in pages if '<div class="highlight' in page(site, relative)]
    assert with_code, f"no page of the user guide shows a code block: {pages}"
    return with_code[0]


def test_the_book_shows_in_a_browser(site, chromium, tmp_path):
    """The front page, a chapter, a notebook and the first page of the user guide, each in its own headless
    Chromium, at 1280 px: rendered with the book's navigation and stylesheet, code highlighted."""
    chapter, notebook, guide = f"chapters/{CHAPTERS[-1].stem}.html", "notebooks/02_fusion.html", first_guide_page(site)
    pages = ["index.html", chapter, notebook, guide]
    with ThreadPoolExecutor(2) as pool:
        shown = dict(zip(pages, pool.map(lambda p: shown_in_chromium(chromium, site, p, tmp_path), pages)))
    for relative, (loaded, shot) in shown.items():
        assert "babytriton" in re.findall(r"<title>(.*?)</title>", loaded)[0], relative
        nav = text_of(primary_nav(loaded))
        assert all(section in nav for section in SECTIONS), (relative, nav[:500])
        assert "stylesheets/extra.css" in loaded, relative
        image = Image.open(shot).convert("RGB")
        assert image.size == (1280, 1600) and len(image.getcolors(maxcolors=1 << 22)) > 50, relative  # not blank
    for relative in (chapter, notebook, guide):
        tokens = highlighted_tokens(shown[relative][0])
        assert len(tokens) > 20 and PYGMENTS_KEYWORDS & set(tokens), (relative, tokens[:20])
    loaded, shot = shown[notebook]
    assert len(svgs(loaded)) >= 3                                            # the fusion graphs
    image = Image.open(shot).convert("RGB")
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 22)}
    assert {(0xff, 0xf4, 0xe0), (0xe8, 0xf0, 0xfe)} <= colours               # a kernel box's fill, a parameter's
    assert widest_code(image) >= 680   # an input cell: 572 px of the 1280 before book/docs/stylesheets/extra.css


# --------------------------------------------------------------------------------------------------
# the course's pages, and the book served on this machine
# --------------------------------------------------------------------------------------------------

def test_the_course_pages_show_the_readmes_tables(site):
    """book/docs/course/ includes the tables of chapters/README.md and exercises/README.md (kept there, once)."""
    course = text_of(page(site, "course/index.html"))
    article = (ROOT / "chapters" / "README.md").read_text()
    rows = [line for line in article.splitlines() if re.match(r"\| `\d\d\.py` \|", line)]   # the article's steps
    assert len(rows) >= 13 and "| exercise (difficulty in stars) |" in article
    assert all(text_of(re.split(r"(?<!\\)\|", row)[2]).strip().replace("`", "") in course for row in rows)
    assert "--8<--" not in course and "exercises/21_tir_backend.py" in course and "tvm.s_tir" in course
    exercises = text_of(page(site, "course/exercises.html"))
    listed = re.findall(r"^\| `(\w+\.py)` \|.*\| `(pytest exercises -k \w+)` \|$",
                        (ROOT / "exercises" / "README.md").read_text(), re.MULTILINE)   # file, its check
    assert len(listed) == len(list((ROOT / "exercises").glob("[0-9w]*.py")))
    assert all(name in exercises and check in exercises for name, check in listed)
    assert "How to attempt one" in exercises and "--8<--" not in exercises


def test_the_book_is_served_on_loopback(site):
    """`build_book.py --serve` (and `python -m babytriton book`): the site over HTTP on 127.0.0.1 only."""
    with build_book.book_server(site, 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address
        try:
            front = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read().decode()
            css = urllib.request.urlopen(f"http://127.0.0.1:{port}/stylesheets/extra.css", timeout=30).read().decode()
            with pytest.raises(SystemExit, match=f"cannot serve the book on port {port} .*--port N"):
                build_book.book_server(site, port)                               # taken: a message, no traceback
        finally:
            server.shutdown()
    assert host == "127.0.0.1" and "babytriton" in front and "course/index.html" in front and ".md-grid" in css


# --------------------------------------------------------------------------------------------------
# the user guide (book/docs/guide/): its Python blocks run while the book is built (book/hooks.py)
# --------------------------------------------------------------------------------------------------

def test_the_guide_and_the_api_pages_are_built(site):
    for path in sorted((ROOT / "book" / "docs" / "guide").glob("*.md")):
        assert (site / "guide" / f"{path.stem}.html").exists(), path.name
    writing = text_of(page(site, "guide/writing.html"))
    assert "'versions': 2" in writing                      # a block's output, shown under it
    api = text_of(page(site, "api.html"))
    assert "Compile a Python tensor function with TVM" in api and "CompilationError" in api


def test_a_guide_block_that_raises_fails_the_build_naming_its_page_and_line(tmp_path):
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n")
    (docs / "guide" / "ok.md").write_text("# Fine\n\n```python\nx = 6 * 7\nprint(x)\n```\n")
    (docs / "guide" / "broken.md").write_text("# Broken\n\n```python\nimport math\n```\n\nText.\n\n"
                                              "```python\nvalue = math.sqrt(4)\nvalue.append(1)\n```\n")
    (tmp_path / "mkdocs.yml").write_text(f"site_name: t\nhooks: [{ROOT / 'book' / 'hooks.py'}]\n")
    config = load_config(config_file=str(tmp_path / "mkdocs.yml"))
    with pytest.raises(Exception, match=r"guide/broken\.md:11: the Python block that starts "
                                        r"`value = math\.sqrt\(4\)` raised AttributeError"):
        mkdocs_build(config)
    (docs / "guide" / "broken.md").unlink()
    mkdocs_build(load_config(config_file=str(tmp_path / "mkdocs.yml")))
    assert "42" in text_of((tmp_path / "site" / "guide" / "ok" / "index.html").read_text())
