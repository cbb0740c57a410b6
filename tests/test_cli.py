"""`python -m babytriton` (babytriton/cli.py): each subcommand in-process through `cli.main`, on a small
file of @jit functions; what `show` prints against the Kernel's own attributes; bad input as one line
on stderr with exit status 2, a function that does not compile as its CompilationError with 1."""
import inspect
import runpy
import sys
import textwrap
from pathlib import Path

import pytest

from babytriton import cli
from babytriton.core import config
from babytriton.runtime import cache

SOURCE = '''
import torch
import babytriton as bt

LIMIT = 3


@bt.jit
def scaled_relu(a, b):
    return torch.relu(a + b) * 2


def softplus_rows(x):
    return torch.log1p(torch.exp(x)).sum(-1)


@bt.jit
def broken(a):
    return a.frobnicate()


@bt.jit
def fixed(a: bt.Tensor((4, 8), "float32"), n: int):
    return a * n


@bt.jit(backend="tir")
def add_one(a: bt.Tensor((4,), "float32"), b: bt.Tensor((4,), "float32")):
    for i in range(4):
        b[i] = a[i] + 1.0
'''


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "kernels.py"
    path.write_text(SOURCE)
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def kernel_for(spec: str, *args, target=None):
    """The Kernel the command line compiles for these example arguments (a disk cache hit after it)."""
    function = cli.load_function(spec, target)
    return function.compile(*cli.parse_arguments(list(args), function, "--args"))


def test_show_prints_the_kernels_own_fusion_map_and_stage_names(capsys, kernels):
    status, out, err = run(capsys, "show", f"{kernels}:scaled_relu", "--args", "4,8", "4,8")
    assert status == 0 and err == ""
    kernel = kernel_for(f"{kernels}:scaled_relu", "4,8", "4,8")
    assert out.startswith("scaled_relu(a: float32[4, 8], b: float32[4, 8]) for llvm")
    assert str(kernel.fusion) in out and "3 ops fused" in out
    assert f"stages: {', '.join(kernel.stages)}\n" in out
    assert Path(kernel.cache_path) in cache.entries(config.cache_dir())   # what `cache` counts


def test_show_one_stage_or_the_source(capsys, kernels):
    kernel = kernel_for(f"{kernels}:scaled_relu", "4,8", "4,8")
    status, out, _ = run(capsys, "show", f"{kernels}:scaled_relu", "--args", "4,8", "4,8", "--stage", "FuseTIR")
    assert status == 0 and out == kernel.stages["FuseTIR"] + "\n"
    status, out, _ = run(capsys, "show", f"{kernels}:scaled_relu", "--args", "4,8", "4,8", "--source")
    assert status == 0 and out == kernel.source + "\n" and "define" in out   # LLVM IR


def test_show_without_arguments_compiles_for_the_annotations(capsys, kernels):
    status, out, err = run(capsys, "show", f"{kernels}:fixed")
    assert status == 0, err
    assert out.startswith("fixed(a: float32[4, 8], n: int64) for llvm")
    assert str(cli.load_function(f"{kernels}:fixed", None).compile().fusion) in out


def test_show_a_tir_backend_function(capsys, kernels):
    status, out, err = run(capsys, "show", f"{kernels}:add_one")
    assert status == 0, err
    kernel = cli.load_function(f"{kernels}:add_one", None).compile()
    lines = out.splitlines()
    assert lines[0].startswith("add_one(a: float32[4], b: float32[4]) for llvm")
    assert lines[2] == "backend='tir': one kernel, as written (nothing fuses)"
    assert f"stages: {', '.join(kernel.stages)}\n" in out


def test_show_for_a_gpu_architecture_without_a_gpu(capsys, kernels):
    status, out, err = run(capsys, "show", f"{kernels}:scaled_relu", "--args", "4,8", "4,8", "--target", "sm_90")
    assert status == 0, err
    assert "for cuda arch=sm_90" in out.splitlines()[0]
    assert "[CUDA: " in out and ", source\n" in out


def test_explain_names_the_key_parts_that_changed(capsys, kernels):
    """A plain function is compiled as @jit would; the second call's shapes differ from the first's."""
    spec = f"{kernels}:softplus_rows"
    status, out, err = run(capsys, "explain", spec, "--args", "4,8", "--then", "4,16:float16")
    assert status == 0, err
    assert out.startswith("first call softplus_rows(x: float32[4, 8]): ") and ", cache key " in out
    assert "shape of `x`: (4, 8) → (4, 16)" in out and "dtype of `x`: float32 → float16" in out
    assert out.rstrip().endswith("the second call compiles again: 2 part(s) of the key differ")
    status, out, _ = run(capsys, "explain", spec, "--args", "4,8", "--then", "4,8")
    assert status == 0 and "in memory: yes" in out
    assert out.rstrip().endswith("nothing recompiles")


@pytest.mark.parametrize("argv, message", [
    (["show", "{dir}/missing.py:f"], "no file {dir}/missing.py"),
    (["show", "{file}"], "is not FILE.py:FUNCTION"),
    (["show", "{file}:scaled_rleu", "--args", "4"], "defines no 'scaled_rleu'; did you mean 'scaled_relu'?"),
    (["show", "{file}:LIMIT"], "'LIMIT' in {file} is not a function (its type is int)"),
    (["show", "{file}:scaled_relu", "--args", "4,x", "4"], "--args '4,x' is not a shape"),
    (["show", "{file}:scaled_relu", "--args", "4:float8", "4"], "unknown dtype 'float8'; use one of bool,"),
    (["show", "{file}:scaled_relu", "--args", "4"], "scaled_relu(a, b) takes 2 argument(s); --args gave 1"),
    (["show", "{file}:fixed", "--args", "4,16", "2"], "parameter 'a' expects shape (4, 8), got (4, 16)"),
    (["show", "{file}:fixed", "--args", "4,8", "two"], "--args 'two' is not a Python value"),
    (["show", "{file}:scaled_relu", "--target", "sm_x"], "unknown target 'sm_x'"),
    (["show", "{file}:scaled_relu"], "--args needed: parameter 'a' is not fully annotated (no annotation)"),
    (["explain", "{file}:scaled_relu", "--args", "4", "4", "--then", "4"], "--then gave 1"),
])
def test_bad_input_is_one_line_and_status_2(capsys, kernels, argv, message):
    names = {"file": kernels, "dir": kernels.parent}
    status, out, err = run(capsys, *[a.format(**names) for a in argv])
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"python -m babytriton {argv[0]}: error: ")
    assert message.format(**names) in err


def test_an_unknown_stage_lists_the_stages(capsys, kernels):
    kernel = kernel_for(f"{kernels}:scaled_relu", "4,8", "4,8")
    status, _, err = run(capsys, "show", f"{kernels}:scaled_relu", "--args", "4,8", "4,8", "--stage", "FuseTri")
    assert status == 2
    assert f"no stage 'FuseTri'; did you mean 'FuseTIR'? (stages: {', '.join(kernel.stages)})" in err


@pytest.mark.parametrize("source, message", [
    ("def f(:\n", "bad.py:1: "),
    ("import torch\n\nraise RuntimeError('no GPU here')\n", "importing {path}:3 raised RuntimeError: no GPU here"),
])
def test_a_file_that_does_not_import(capsys, tmp_path, source, message):
    path = tmp_path / "bad.py"
    path.write_text(source)
    status, out, err = run(capsys, "show", f"{path}:f")
    assert (status, out) == (2, "") and err.count("\n") == 1
    assert message.format(path=path) in err


def test_a_compilation_error_prints_its_own_message(capsys, kernels):
    status, out, err = run(capsys, "show", f"{kernels}:broken", "--args", "4")
    assert (status, out) == (1, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"{kernels}:19:") and "'frobnicate'" in lines[0]
    assert lines[1].strip() == "return a.frobnicate()" and "^" in lines[2]


def test_cache_shows_and_clears_only_compiled_versions(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    for function, digest in [("f", "0" * 32), ("f", "1" * 32), ("g", "2" * 32)]:
        entry = tmp_path / function / digest
        entry.mkdir(parents=True)
        (entry / "lib.so").write_bytes(b"x" * 1000)
    (tmp_path / "f" / ".tmp-0123-99-abcd").mkdir()                     # a writer that died
    (tmp_path / "g" / f".lock-{'2' * 32}").touch()                     # an entry's lock file (cache.entry_lock)
    (tmp_path / "meta_schedule").mkdir()
    (tmp_path / "meta_schedule" / "database.json").write_bytes(b"y" * 2048)
    (tmp_path / "notes.txt").write_text("not babytriton's")           # a cache pointed at a shared folder
    status, out, _ = run(capsys, "cache")
    assert status == 0
    assert out.splitlines()[:3] == [f"cache {tmp_path}: on", "  compiled versions: 3 of 2 function(s), 2.9 KB",
                                    "  tuning records:    2.0 KB (meta_schedule/)"]
    status, out, _ = run(capsys, "cache", "clear")
    assert (status, out) == (0, f"removed 3 compiled version(s) (2.9 KB) from {tmp_path}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta_schedule", "notes.txt"]
    status, out, _ = run(capsys, "cache", "clear", "--tuning")
    assert "and the tuning records (2.0 KB)" in out and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    monkeypatch.setenv("BABYTRITON_CACHE", "0")
    assert "off (BABYTRITON_CACHE=0" in run(capsys, "cache")[1]


def test_book_outside_a_clone_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "SCRIPTS", tmp_path)
    status, out, err = run(capsys, "book")
    assert (status, out) == (2, "")
    assert f"the book is built from a clone of the repository: {tmp_path / 'build_book.py'} is not here" in err


def test_book_builds_then_serves(capsys, tmp_path, monkeypatch):
    """With a stand-in build_book.py (the real build takes minutes): build(), then serve(site, port)."""
    (tmp_path / "build_book.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        SITE = Path({str(tmp_path / 'site')!r})
        def build():
            print("building")
            return SITE
        def serve(site_dir, port=8000):
            print("serving", site_dir, port)
    """))
    monkeypatch.setattr(cli, "SCRIPTS", tmp_path)
    status, out, _ = run(capsys, "book", "--port", "8123")
    assert status == 0
    assert out.splitlines() == ["building", f"built {tmp_path / 'site' / 'index.html'}",
                                f"serving {tmp_path / 'site'} 8123"]
    assert run(capsys, "book", "--no-serve")[1].splitlines()[-1].startswith("built ")   # built only


def test_the_real_build_book_has_what_book_calls():
    build_book = cli._script("build_book")
    assert list(inspect.signature(build_book.build).parameters)[0] == "out"   # all defaulted
    assert all(p.default is not p.empty for p in inspect.signature(build_book.build).parameters.values())
    assert list(inspect.signature(build_book.serve).parameters)[:2] == ["site_dir", "port"]


@pytest.mark.parametrize("command", [[], ["show"], ["explain"], ["cache"], ["book"]])
def test_help(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m babytriton {' '.join(command)}".rstrip())


def test_python_dash_m(capsys, tmp_path, monkeypatch):
    """`python -m babytriton` runs babytriton/__main__.py, which exits with main's status (run here in-process:
    a new interpreter would cost seconds of imports)."""
    monkeypatch.setattr(sys, "argv", ["babytriton", "show", f"{tmp_path}/missing.py:f"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("babytriton", run_name="__main__")
    assert exit_.value.code == 2
    assert capsys.readouterr() == ("", f"python -m babytriton show: error: no file {tmp_path}/missing.py\n")
