"""Test set-up shared by every test module: GPU tests skip cleanly on machines without CUDA, and the
disk cache lives in a fresh folder per test session (never the user's ~/.cache, never warm in CI), and
the CPU correctness tests that take `cpu_target` run for two vector widths (see `cpu_targets`); a chapter
or notebook runs once per session, whichever worker asks first (`pytest_configure`)."""
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

RUNS_ENV = "BABYTRITON_BOOK_RUNS"  # scripts/build_book.py's `_shared`
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def pytest_configure(config):
    """One folder for the session's chapter runs and notebook executions, shared by its xdist workers
    (they inherit the variable): test_chapters, test_whole_chapters and test_book each run every chapter,
    on whichever worker, and run it once. Each run is a fork of a Python that has imported torch and TVM
    already (tests/chapter_zygote.py): about 4 s of CPU less per chapter, and per notebook that the
    plain executor (scripts/store_executions.py) runs."""
    if not hasattr(config, "workerinput") and RUNS_ENV not in os.environ:
        config.babytriton_runs = tempfile.mkdtemp(prefix="babytriton-runs-")
        os.environ[RUNS_ENV] = config.babytriton_runs
    sys.path.insert(0, str(SCRIPTS))
    import build_book
    import chapter_zygote
    import store_executions
    build_book._run_chapter = chapter_zygote.run
    store_executions._run_python = chapter_zygote.run_python


def pytest_unconfigure(config):
    import chapter_zygote
    chapter_zygote.stop()
    folder = getattr(config, "babytriton_runs", None)
    if folder:
        os.environ.pop(RUNS_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory):
    """BABYTRITON_CACHE_DIR for the whole session (subprocesses inherit it); dumps stay off; a schedule
    rule's programming error raises (config.strict_rules) instead of passing the kernel on."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path_factory.mktemp("babytriton-cache")))
        patch.setenv("BABYTRITON_STRICT_RULES", "1")
        for name in ("BABYTRITON_CACHE", "BABYTRITON_DUMP", "BABYTRITON_DUMP_DIR"):
            patch.delenv(name, raising=False)
        yield os.environ["BABYTRITON_CACHE_DIR"]


@pytest.fixture
def products_as_kernels(monkeypatch):
    """CPU float32 and float16 matrix products stay babytriton's kernels (CPUMatmul), as on a CPU
    without half arithmetic whose torch has no MKL (targets.offloaded_matmuls), whatever this one is:
    tests of CPUMatmul itself must not depend on the machine's vendor."""
    from babytriton.core import targets
    monkeypatch.setattr(targets, "host_cpu", lambda: ("", frozenset()))
    monkeypatch.setattr(targets, "SMALL_PRODUCT", 0)


def cpu_targets() -> dict:
    """The CPU targets that `cpu_target` tests run for: the host, and a narrower vector width the host
    also runs, so that no result may depend on the width. An AVX-512 host adds AVX2 (`haswell`, 8
    float32 lanes for 16); an AVX2 host, which cannot run AVX-512 code, adds SSE4.2 (`x86-64-v2`, 4
    lanes for 8); any other host runs itself only."""
    import tvm

    from babytriton.core import targets
    host = targets.resolve_target("cpu")
    has = functools.partial(tvm.target.codegen.target_has_features, target=host)
    narrower = "haswell" if has("avx512f") else "x86-64-v2" if has("avx2") else None
    found = {"host": host}
    if narrower and host.attrs.get("mcpu") != narrower:
        found[narrower] = tvm.target.Target({"kind": "llvm", "mtriple": host.attrs["mtriple"], "mcpu": narrower})
    return found


CPU_TARGETS = cpu_targets()


@pytest.fixture(params=list(CPU_TARGETS))
def cpu_target(request, monkeypatch):
    """Each target of `cpu_targets()` (its name is the test id), with `target="cpu"`, the default,
    resolved to it meanwhile: functions decorated during the test (the fuzzer's programs) build for it."""
    from babytriton.core import targets
    target, resolve = CPU_TARGETS[request.param], targets.resolve_target
    monkeypatch.setattr(targets, "resolve_target", lambda option: target if isinstance(option, str)
                        and targets.TARGET_ALIASES.get(option) == "llvm" else resolve(option))
    return target
