"""Test set-up shared by every test module: GPU tests skip cleanly on machines without CUDA, and the
disk cache lives in a fresh folder per test session (never the user's ~/.cache, never warm in CI)."""
import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory):
    """BABYTRITON_CACHE_DIR for the whole session (subprocesses inherit it); dumps stay off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path_factory.mktemp("babytriton-cache")))
        for name in ("BABYTRITON_CACHE", "BABYTRITON_DUMP", "BABYTRITON_DUMP_DIR"):
            patch.delenv(name, raising=False)
        yield os.environ["BABYTRITON_CACHE_DIR"]


@pytest.fixture
def products_as_kernels(monkeypatch):
    """CPU float32 and float16 matrix products stay babytriton's kernels (CPUMatmul), as on a CPU
    without half arithmetic whose torch has no MKL (targets.offloaded_matmuls), whatever this one is:
    tests of CPUMatmul itself must not depend on the machine's vendor."""
    from babytriton import targets
    monkeypatch.setattr(targets, "host_cpu", lambda: ("", frozenset()))
    monkeypatch.setattr(targets, "SMALL_PRODUCT", 0)
