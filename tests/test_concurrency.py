"""Threads calling @jit functions at once: right results, one compile per cache key, and the process's
stderr (silenced while TVM compiles) given back intact."""
import os
import threading

import torch

import babytriton as bt

THREADS = 8


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
