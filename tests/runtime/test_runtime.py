"""runtime/kernel.py: one `Kernel` for both backends and for disk hits, complete when it is made."""
import numpy as np
import pytest
import torch

import babytriton as bt
from babytriton.runtime import kernel as runtime
from babytriton.frontend.layouts import layout_of

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

M48 = bt.Tensor((4, 8), "float32")


def axpy48(a: M48, b: M48):
    return a * 2.0 + b


@pytest.mark.parametrize("make", [
    lambda base: base[:32].reshape(4, 8),             # compact, aligned: handed to the VM as it is
    lambda base: base[1:33].reshape(4, 8),            # compact, 4 bytes past a 64-byte boundary
    lambda base: base[:32].reshape(8, 4).t(),         # transposed
    lambda base: base[:32].reshape(4, 8)._neg_view(),  # torch's negative bit
    lambda base: base[:8].expand(4, 8),               # broadcast (stride 0)
], ids=["compact", "misaligned", "transposed", "negated", "broadcast"])
def test_one_runner_takes_every_layout_of_its_shape(make):
    """A runner is made for a shape, not a layout, except a permuted or broadcast one, which the version
    reads in place (frontend/layouts.py): the first call and the next ones, in any layout at either
    argument, give torch's values (a layout TVM can't take is copied, not misread)."""
    f = bt.jit(axpy48, cache=False)
    base = torch.arange(64.0)
    view, b = make(base), torch.randn(4, 8)
    torch.testing.assert_close(f(view, b), view * 2.0 + b)       # the runner made for this layout
    torch.testing.assert_close(f(b, view), b * 2.0 + view)
    compact = torch.randn(4, 8)
    torch.testing.assert_close(f(compact, compact), compact * 3.0)   # ... and reused for another
    torch.testing.assert_close(f(view, view), view * 3.0)
    assert f.stats["hits"] + f.stats["misses"] == (1 if layout_of(view) is None else 4)


def test_results_come_back_as_torch_tensors_without_a_copy():
    """Tensors in and out are shared with the VM: a result that is an argument is that memory."""
    @bt.jit(cache=False)
    def pair(x, y):
        return x, x + y

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    same, total = pair(x, y)
    assert type(same) is torch.Tensor and type(total) is torch.Tensor
    assert same.data_ptr() == x.data_ptr()
    torch.testing.assert_close(total, x + y)
    xn = x.numpy()
    same, total = pair(xn, y.numpy())           # numpy in: numpy out, fresh arrays
    assert isinstance(total, np.ndarray) and np.allclose(total, (x + y).numpy())
    assert np.array_equal(same, xn) and not np.shares_memory(same, xn)


def test_only_code_with_parallel_loops_sizes_the_thread_pool():
    small = bt.jit(axpy48, cache=False).compile()   # 32 elements: one loop on the calling thread
    big = bt.jit(doubled_row_sum, cache=False).compile(torch.ones(256, 1024))
    assert not small.uses_thread_pool and big.uses_thread_pool
    gpu = bt.jit(axpy, target="gpu", cache=False).compile(torch.ones(1 << 20), torch.ones(1 << 20))
    assert not gpu.uses_thread_pool


def doubled_row_sum(x):
    return (x * 2.0 + 1.0).sum(axis=-1)


def test_numpy_arrays_in_every_layout_through_one_runner():
    """numpy arrays go to the VM as torch tensors sharing their memory where TVM can take it (else a
    copy: read-only, reversed, strided, unaligned); results are fresh arrays."""
    f = bt.jit(axpy48, cache=False)
    base = np.arange(80, dtype=np.float32)
    frozen = base[:32].reshape(4, 8).copy()
    frozen.flags.writeable = False
    b = np.ones((4, 8), np.float32)
    arrays = [base[:32].reshape(4, 8), base[1:33].reshape(4, 8), base[:32].reshape(8, 4).T,
              base[::-1][:32].reshape(4, 8), base[::2][:32].reshape(4, 8), frozen]
    for a in arrays:
        out = f(a, b)
        assert isinstance(out, np.ndarray) and np.array_equal(out, a * 2.0 + b)
    assert f.stats["hits"] + f.stats["misses"] == 1


def plus_one(x):
    return x * 2.0 + 1.0


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_vm_lets_go_of_a_large_result(device):
    """The Relax VM keeps the value its last call returned until its next call; after a call over at
    least RELEASE_BYTES the runner makes it let go, so a result the caller dropped goes back to the
    VM's pool and the next call writes the same memory (one buffer in cache, not two alternating)."""
    x = torch.randn(runtime.RELEASE_BYTES // 4 + 1024, device=device)
    f = bt.jit(target="gpu" if device == "cuda" else "cpu")(plus_one)
    out = f(x)
    torch.testing.assert_close(out, x * 2.0 + 1.0)
    first = out.data_ptr()
    del out
    again = f(x)
    assert again.data_ptr() == first
    kept = f(x)          # while the caller holds a result, the next one is other memory
    assert kept.data_ptr() != again.data_ptr()
    torch.testing.assert_close(kept, x * 2.0 + 1.0)
