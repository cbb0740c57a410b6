"""runtime/threads.py: parallel CPU kernels run on torch's OpenMP team, sized like torch's, with TVM's errors,
and on TVM's own pool where the team can't be had."""
import ctypes
import os
import threading

import pytest
import torch
import tvm
from tvm.script import tirx as T

import babytriton as bt
from babytriton.runtime import threads

ROWS = bt.Tensor(("n", 4096), "float32")


def softmax(x: ROWS):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def middle_sum(x):
    return x.sum(axis=1)


@pytest.fixture
def torch_threads():
    """Restores torch's thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_team_is_torchs_here():
    # CI's machine has a C compiler and torch's CPU wheel (OpenMP): anything else is a regression
    assert threads.pool() == "torch's OpenMP threads"


@pytest.mark.parametrize("cache", [False, True])
def test_parallel_kernels_run_a_library_whose_launch_is_the_teams(cache):
    """In memory or from the disk cache, a kernel with parallel loops runs code loaded from a library
    whose launch pointer is threads.c's; a kernel without any keeps TVM's in-memory code, or with the disk
    cache runs the library just stored (a copy of it: its code compiled once, not again by the VM's JIT)."""
    x = torch.randn(512, 4096)
    kernel = bt.jit(softmax, cache=cache).compile(x)
    assert kernel.uses_thread_pool
    assert [m.kind for m in kernel.executable.mod.imports] == ["library"]
    if cache:
        loaded = ctypes.CDLL(os.path.join(kernel.cache_path, "lib.so"))
        launch = ctypes.c_void_p.in_dll(loaded, "__TVMBackendParallelLaunch").value
        launcher = threads._launcher()[0]
        assert launch == ctypes.cast(launcher.bt_parallel_launch, ctypes.c_void_p).value
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))
    tiny = bt.jit(middle_sum, cache=cache).compile(torch.ones(2, 3, 4))
    assert not tiny.uses_thread_pool
    assert [m.kind for m in tiny.executable.mod.imports] == (["library"] if cache else ["llvm"])
    torch.testing.assert_close(tiny(torch.ones(2, 3, 4)), torch.ones(2, 3, 4).sum(1))


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_team_follows_torchs_thread_count(count, torch_threads):
    torch.set_num_threads(count)
    f = bt.jit(middle_sum, cache=False)
    x = torch.randn(16, 512, 64)
    torch.testing.assert_close(f(x), x.sum(1), rtol=1e-5, atol=1e-4)
    assert threads._launcher()[0].bt_threads() == count


def test_other_threads_run_their_kernels_alone_and_right(torch_threads):
    torch.set_num_threads(2)
    f = bt.jit(softmax, cache=False)
    xs = [torch.randn(300 + 7 * i, 4096) for i in range(4)]
    results, counts = {}, {}

    def work(i):
        results[i] = f(xs[i])
        counts[i] = threads._launcher()[0].bt_threads()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    f(xs[0])   # the main thread's team meanwhile
    for worker in workers:
        worker.join()
    for i, x in enumerate(xs):
        torch.testing.assert_close(results[i], torch.softmax(x, -1))
    assert set(counts.values()) == {1}
    assert threads._launcher()[0].bt_threads() == 2


@T.prim_func
def _doubled_if_positive(a: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "doubled"})
    for i in T.parallel(64):
        assert a[i] >= T.float32(0), "a negative element"
        a[i] = a[i] * T.float32(2)


@pytest.mark.parametrize("bad", [0, 63])
def test_a_failing_task_raises_its_error_on_the_launching_thread(bad, torch_threads):
    """Element 0 is the launching thread's task, element 63 another thread's: either error reaches
    the caller with TVM's message, and the team goes on working."""
    torch.set_num_threads(2)
    threads.sync_threads()
    library = threads.run_on_torch_threads(tvm.compile(tvm.IRModule({"doubled": _doubled_if_positive}),
                                                       target="llvm"), "tir")
    x = torch.ones(64)
    x[bad] = -1.0
    with pytest.raises(RuntimeError, match="a negative element"):
        library["doubled"](x)
    y = torch.ones(64)
    library["doubled"](y)
    assert torch.equal(y, torch.full((64,), 2.0))


def test_without_the_team_kernels_run_on_tvms_pool(monkeypatch, torch_threads):
    monkeypatch.setattr(threads, "_launcher", lambda: (None, "no team in this test"))
    monkeypatch.setattr(threads._sizes, "threads", None)
    torch.set_num_threads(2)
    assert threads.pool() == "TVM's thread pool (no team in this test)"
    x = torch.randn(512, 4096)
    kernel = bt.jit(softmax, cache=False).compile(x)
    assert [m.kind for m in kernel.executable.mod.imports] == ["llvm"]
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))


def test_a_launcher_that_does_not_compile_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(threads.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    launcher, why = threads._launcher.__wrapped__()
    assert launcher is None and why.startswith("threads.c does not compile here")
