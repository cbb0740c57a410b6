"""runtime.py: one `Kernel` for both backends and for disk hits, complete when it is made."""
import pytest
import torch

import babytriton as bt
from babytriton import runtime

V = bt.Tensor(("n",), "float32")


def axpy(a: V, b: V):
    return a * 2.0 + b


def scale_in_place(out: bt.Tensor((8,), "float32")):
    for i in bt.parallel(8):
        out[i] = out[i] * 3.0


@pytest.fixture
def frozen_kernels(monkeypatch):
    """Kernels that refuse a public attribute set after __init__ (private caches may fill later)."""
    made = set()
    init, setattr_ = runtime.Kernel.__init__, runtime.Kernel.__setattr__

    def watched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.add(id(self))

    def watched_setattr(self, name, value):
        if id(self) in made and not name.startswith("_"):
            raise AssertionError(f"Kernel.{name} set after the Kernel was made")
        setattr_(self, name, value)

    monkeypatch.setattr(runtime.Kernel, "__init__", watched_init)
    monkeypatch.setattr(runtime.Kernel, "__setattr__", watched_setattr)
    return made


def test_a_compiled_and_a_loaded_kernel_are_complete_when_made(frozen_kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    a, b = torch.randn(5), torch.randn(5)
    compiled = bt.jit(axpy).compile(a, b)
    loaded = bt.jit(axpy).compile(a, b)          # another JITFunction: its version comes from disk
    assert len(frozen_kernels) == 2
    assert not compiled.from_disk and loaded.from_disk
    assert compiled.cache_key.digest == loaded.cache_key.digest and loaded.cache_path == compiled.cache_path
    assert loaded.size_checks == compiled.size_checks and loaded.globals_key == compiled.globals_key
    torch.testing.assert_close(loaded(a, b), a * 2.0 + b)


@pytest.mark.parametrize("fn, backend", [(axpy, "relax"), (scale_in_place, "tir")])
def test_both_backends_give_the_same_runtime_object(fn, backend):
    f = bt.jit(fn, backend=backend, cache=False)
    kernel = f.compile()
    assert type(kernel) is bt.Kernel and kernel.backend == backend
    assert "source" in kernel.stages and kernel.module is not None
    if backend == "tir":
        out = torch.arange(8, dtype=torch.float32)
        assert kernel(out) is out
        torch.testing.assert_close(out, torch.arange(8, dtype=torch.float32) * 3.0)
    else:
        a = torch.randn(4)
        torch.testing.assert_close(kernel(a, a), a * 3.0)


def adam_like(p: V, g: V, lr: float, step: int):
    return p - lr * g / (1.0 - 0.9 ** step)


def test_scalar_arguments_are_zero_d_tensors_of_their_own():
    f = bt.jit(adam_like)
    p, g = torch.rand(16), torch.rand(16)
    torch.testing.assert_close(f(p, g, 1e-3, 3), p - 1e-3 * g / (1.0 - 0.9 ** 3))
    torch.testing.assert_close(f(p, g, -0.0, 1), p - (-0.0) * g / (1.0 - 0.9))


@pytest.mark.gpu
def test_a_call_with_scalar_arguments_never_waits_for_the_gpu():
    """Scalars reach the GPU by a fill kernel, not a copy from pageable memory that waits for the
    stream (which left the GPU idle between calls)."""
    f = bt.jit(target="gpu")(adam_like)
    p, g = torch.rand(1 << 20, device="cuda"), torch.rand(1 << 20, device="cuda")
    f(p, g, 1e-3, 3)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = f(p, g, 1e-3, 4)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out, p - 1e-3 * g / (1.0 - 0.9 ** 4))
