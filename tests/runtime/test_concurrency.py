"""Threads calling @jit functions at once: right results, one compile per cache key, and the process's
stderr (silenced while TVM compiles) given back intact.

A Relax VM is not re-entrant, so each thread runs its own (Kernel.vm_function). The hammering tests
run their threads in a subprocess: sharing a VM used to crash the process (SIGSEGV) as often as it
failed a call, and a crash must fail the test, not end the test run."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import babytriton as bt

THREADS = 8
CALLS = 400   # per thread: the shared VM failed within a few hundred calls
REPO = Path(__file__).resolve().parents[2]


def run_threads(work) -> list:
    """Run work(i) in THREADS threads started together; the exceptions they raised."""
    start = threading.Barrier(THREADS)
    errors = []

    def body(i):
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_eight_threads_mixed_shapes_compile_once_per_key():
    @bt.jit(cache=False)
    def f(x, y, n):
        return sigmoid(x) * y + x.sum(axis=-1, keepdims=True) * n

    # unannotated parameters: each shape, dtype and number type is its own key
    keys = [((2, 3), torch.float32, 2), ((4, 5), torch.float32, 2), ((3, 3), torch.float64, 2),
            ((1, 7), torch.float32, 0.5), ((2, 3), torch.float32, 1.5)]

    def work(i):
        for step in range(12):
            shape, dtype, n = keys[(i + step) % len(keys)]
            x, y = torch.randn(shape, dtype=dtype), torch.randn(shape[-1], dtype=dtype)
            want = torch.sigmoid(x) * y + x.sum(-1, keepdim=True) * n
            torch.testing.assert_close(f(x, y, n), want)
            if step % 4 == 0:
                torch.testing.assert_close(f.eager(x, y, n), want)

    assert run_threads(work) == []
    info = f.cache_info()
    assert info["compilations"] == info["versions"] == info["misses"] == len(keys)


def test_threads_compiling_different_functions_give_stderr_back():
    before = os.fstat(2)
    functions = []
    for i in range(THREADS):
        @bt.jit(cache=False)
        def g(x, k: bt.constexpr):
            unused = x * 3  # dead code: TVM warns about it from C++, silenced while compiling
            return x ** 3 + k

        functions.append(g)

    def work(i):
        x = torch.randn(5)
        torch.testing.assert_close(functions[i](x, i), x ** 3 + i)

    assert run_threads(work) == []
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    assert all(g.cache_info()["compilations"] == 1 for g in functions)


# --------------------------------------------------------------------------------------------------
# 8 threads × hundreds of calls of one function, every result compared with torch (in a subprocess)
# --------------------------------------------------------------------------------------------------

def hammer(fn, make_case, versions: int):
    """Each thread calls fn on its own CALLS cases (made beforehand, so that the threads overlap in
    the compiled code as much as they can) and compares each result with torch's."""
    cases = [[make_case(torch.Generator().manual_seed(1000 * i + step), step) for step in range(CALLS)]
             for i in range(THREADS)]

    def work(i):
        outs = [fn(*args) for args, _ in cases[i]]
        for out, (args, want) in zip(outs, cases[i]):
            if isinstance(out, np.ndarray):
                out = torch.from_numpy(out)
            torch.testing.assert_close(out, want)

    return fn, run_threads(work), versions


def hammer_symbolic_sizes():
    """One compiled version, run by every thread at once with a different n on each call."""
    @bt.jit(cache=False)
    def f(x: bt.Tensor(("n", 4)), y: bt.Tensor(("n", 4))):
        return sigmoid(x) * y + x.sum(axis=-1, keepdims=True)

    def case(gen, step):
        n = int(torch.randint(0, 40, (), generator=gen))
        x, y = torch.randn(n, 4, generator=gen), torch.randn(n, 4, generator=gen)
        return (x, y), torch.sigmoid(x) * y + x.sum(-1, keepdim=True)

    return hammer(f, case, 1)


KINDS = [((3, 4), torch.float32, "torch"), ((5, 2), torch.float32, "torch"), ((1, 7), torch.float64, "torch"),
         ((6, 6), torch.float32, "numpy"), ((2, 3), torch.float64, "numpy"), ((4, 1), torch.float32, "torch")]


def hammer_unannotated_shapes():
    """Unannotated parameters: new shapes, dtypes and array kinds arrive from several threads at once,
    each compiling its own version while the others run theirs."""
    @bt.jit(cache=False)
    def f(x, y):
        return x * y - x.max(axis=0, keepdims=True)

    def case(gen, step):
        shape, dtype, kind = KINDS[step % len(KINDS)]
        x, y = torch.randn(shape, dtype=dtype, generator=gen), torch.randn(shape, dtype=dtype, generator=gen)
        want = x * y - x.max(0, keepdim=True).values
        return ((x.numpy(), y.numpy()) if kind == "numpy" else (x, y)), want

    return hammer(f, case, len(KINDS))


def hammer_run_time_loop():
    """A loop over range(n), n an int argument: recursive Relax functions, deep VM frames."""
    @bt.jit(cache=False)
    def f(x, n: int):
        acc = x
        for i in range(n):
            acc = acc * 0.5 + x * i
        return acc

    def case(gen, step):
        n = int(torch.randint(0, 12, (), generator=gen))
        x = torch.randn(3, 4, generator=gen)
        want = x
        for k in range(n):
            want = want * 0.5 + x * k
        return (x, n), want

    return hammer(f, case, 1)


def hammer_tir_backend():
    """backend="tir": the PrimFunc is called directly (no VM), each call writing its own output."""
    @bt.jit(cache=False, backend="tir")
    def axpy(x: bt.Tensor(("n",), "float32"), y: bt.Tensor(("n",), "float32"), out: bt.Tensor(("n",), "float32")):
        for i in bt.parallel(x.shape[0]):
            out[i] = x[i] * 2.0 + y[i]

    def case(gen, step):
        n = int(torch.randint(0, 100, (), generator=gen))
        x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
        return (x, y, torch.empty(n)), x * 2.0 + y

    return hammer(axpy, case, 1)


HAMMERS = {f.__name__: f for f in (hammer_symbolic_sizes, hammer_unannotated_shapes, hammer_run_time_loop,
                                   hammer_tir_backend)}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")
def test_threads_that_end_leave_no_pool_workers_behind():
    """TVM keeps a pool of workers per OS thread that ran a parallel kernel and never frees it: a
    thread per task used to leak one pool per thread. Other threads now run on a pool of one."""
    @bt.jit(cache=False)
    def f(x):
        return (x * 2 + 1).sum(axis=-1)

    x = torch.randn(256, 1024)
    want = (x * 2 + 1).sum(-1)
    torch.testing.assert_close(f(x), want)       # the main thread's pool exists from here on
    before = len(os.listdir("/proc/self/task"))
    for _ in range(3):
        assert not run_threads(lambda i: torch.testing.assert_close(f(x), want))
    # 3 x 8 threads ran kernels: a pool each left at least 24 workers behind (a few threads of other
    # libraries may come and go meanwhile)
    assert len(os.listdir("/proc/self/task")) <= before + 4, "threads that ended left TVM workers behind"
    torch.testing.assert_close(f(x), want)       # the main thread keeps its own pool


@pytest.fixture(scope="module")
def hammered() -> subprocess.CompletedProcess:
    """Every hammer, one after another, in one subprocess (its start, importing torch and TVM, is most
    of a hammer's time)."""
    env = dict(os.environ, BABYTRITON_CACHE="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-X", "faulthandler", __file__, *HAMMERS], env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("name", list(HAMMERS))
def test_eight_threads_hundreds_of_calls_each(hammered, name):
    tail = (hammered.stdout + hammered.stderr)[-3000:]
    assert f"{name}: all results right" in hammered.stdout, \
        f"exit {hammered.returncode} (negative: killed by that signal, -11 a segfault):\n{tail}"


def _hammer(name: str) -> None:
    """One hammer, in the subprocess of `hammered`: its first errors, then its verdict."""
    fn, errors, versions = HAMMERS[name]()
    for error in errors[:3]:
        print(f"{name}: {type(error).__name__}: {error}")
    info = fn.cache_info()
    if not errors and info["compilations"] == info["versions"] == versions:
        print(f"{name}: all results right", info)
    else:
        print(f"{name}: {len(errors)} of {THREADS} threads failed; cache {info}, {versions} versions expected")


if __name__ == "__main__":  # the hammers named, in the subprocess of `hammered`
    sys.setswitchinterval(1e-6)  # threads take turns as often as CPython lets them: more interleavings
    for hammer_name in sys.argv[1:]:
        _hammer(hammer_name)
        sys.stdout.flush()
