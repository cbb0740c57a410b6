"""The book (scripts/build_book.py): it builds, each chapter's page shows its output and its diff against
the chapter it imports, each notebook's page its outputs (IR text, SVG graphs, plots), and the pages
show them in a real browser (headless Chromium; that test skips where `chromium` is not installed:
`apt-get install chromium`).

The chapters and notebooks run once per test session (build_book.run_chapter/execute_notebook remember
them), so with tests/course/test_chapters.py and tests/course/test_notebooks.py in the same session the book costs
only its MkDocs build and the browser.
"""
import base64
import html
import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocs_jupyter")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402
import store_executions  # noqa: E402

CHAPTERS = build_book.chapter_files()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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

def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           *args], capture_output=True, text=True, timeout=120)


def dom(site: Path, relative: str) -> str:
    """The page's DOM after Chromium loaded it and ran its scripts."""
    result = chromium("--virtual-time-budget=2000", "--dump-dom", (site / relative).as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_every_page_shows_in_a_browser(site, tmp_path):
    pages = (["index.html"] + [f"chapters/{p.stem}.html" for p in CHAPTERS]
             + [f"notebooks/{p.stem}.html" for p in NOTEBOOKS])
    with ThreadPoolExecutor(3) as pool:
        doms = dict(zip(pages, pool.map(lambda relative: dom(site, relative), pages)))
    for relative, loaded in doms.items():
        shown = text_of(loaded)
        assert "babytriton" in shown, relative
        assert "404" not in re.findall(r"<title>(.*?)</title>", loaded)[0], relative
    for path in CHAPTERS:
        shown = text_of(doms[f"chapters/{path.stem}.html"])
        assert "What it prints" in shown and "The code" in shown
    assert "@R.function" in text_of(doms["notebooks/01_tour.html"])       # IR text
    assert len(svgs(doms["notebooks/02_fusion.html"])) >= 3                # the graphs
    if (ROOT / "benchmarks" / "RESULTS.md").exists():
        assert "data:image/png;base64," in doms["notebooks/04_gpu_schedules.html"]  # the plot
    # What a reader sees: a screenshot of the fusion notebook, in colour (the SVG boxes) and not blank.
    shot = tmp_path / "02_fusion.png"
    result = chromium("--window-size=1280,2400", f"--screenshot={shot}", (site / "notebooks/02_fusion.html").as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    image = pytest.importorskip("PIL.Image").open(shot).convert("RGB")
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 22)}
    assert len(colours) > 50
    assert {(0xff, 0xf4, 0xe0), (0xe8, 0xf0, 0xfe)} <= colours   # a kernel box's fill, a parameter's
