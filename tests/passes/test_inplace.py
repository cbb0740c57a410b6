"""Parameters updated in place written where they are (babytriton/passes/inplace.py): the kernel computing a
parameter's new value writes the caller's memory (call_tir_inplace) where its structure makes that safe,
else the value is copied back as before; either way the results are torch's."""
import shutil
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}


def sgd(param, grad, lr: float = 0.01, weight_decay: float = 1e-4):
    param.add_(grad.add(param, alpha=weight_decay), alpha=-lr)


def sgd_momentum(param, grad, buf, lr: float = 0.01, momentum: float = 0.9, weight_decay: float = 1e-4):
    d_p = grad.add(param, alpha=weight_decay)
    buf.mul_(momentum).add_(d_p)
    param.add_(buf, alpha=-lr)


def adam_like(p, g, m, v, lr: float = 1e-3):
    m.lerp_(g, 0.1)
    v.mul_(0.999).addcmul_(g, g, value=0.001)
    p.addcdiv_(m, v.sqrt().add_(1e-8), value=-lr)


def shifted(p, g):          # p[i] takes p[n-1-i]: another element's old value
    p.add_(p.flip(0)).add_(g)


def normalised(p):          # a reduction over p: its own kernel, before the division writes p in place
    p.div_(p.abs().sum())


def rolled(p):              # p[i] takes p[i-1]
    p.copy_(p.roll(1))


def scaled_back(p, g):      # p read after its update, through its name: the new value
    p.add_(g)
    return p * 2


COMPILED = {f.__name__: bt.jit(f) for f in (sgd, sgd_momentum, adam_like, shifted, normalised, rolled, scaled_back)}
# the rewrite runs after scheduling, where a new value read back is read where it was written: buf, m
# and v go in place too, and so does scaled_back's p (its `p * 2` reads the element just written)
IN_PLACE = {"normalised", "sgd", "sgd_momentum", "adam_like", "scaled_back"}


def _step(name, tensors, compiled: bool):
    fn = COMPILED[name] if compiled else globals()[name]
    with torch.no_grad():
        return fn(*tensors)


def _inputs(name, shape, dtype, gen):
    count = {"sgd": 2, "sgd_momentum": 3, "adam_like": 4, "shifted": 2, "normalised": 1, "rolled": 1,
             "scaled_back": 2}[name]
    out = [torch.randn(shape, generator=gen).to(dtype) for _ in range(count)]
    if name == "adam_like":
        out[3] = out[3].abs()
    return out


def _check(name, shape, dtype, layout=lambda t: t):
    gen = torch.Generator().manual_seed(0)
    mine = [layout(t) for t in _inputs(name, shape, dtype, gen)]
    theirs = [t.clone() for t in mine]
    pointers = [t.data_ptr() for t in mine]
    got, want = _step(name, mine, True), _step(name, theirs, False)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b, equal_nan=True, **tol)
    if want is not None:
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
    assert [t.data_ptr() for t in mine] == pointers  # the caller's tensors, updated


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_updates_match_torch_and_are_written_in_place_only_where_safe(name):
    """Scheduled as computing new values (vectorised and parallel: TVM refuses both for a block that
    reads and writes one buffer, which left `y.add_(x)` a serial loop), then written in place."""
    _check(name, (1000,), torch.float32)
    kernel = COMPILED[name].compile(*_inputs(name, (1 << 16,), torch.float32, torch.Generator()))
    schedule = kernel.stages["schedule"]
    assert ("call_tir_inplace" in schedule) == (name in IN_PLACE), schedule[-1500:]
    if name in ("sgd_momentum", "adam_like"):   # no parameter copied back: every result written in place
        assert "inplace_indices=[-1" not in schedule and ", -1]" not in schedule, schedule[-1500:]
    assert all(k.rule.startswith("CPU") for k in kernel.fusion), str(kernel.fusion)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(sorted(COMPILED)), n=st.integers(1, 3000),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), transposed=st.booleans())
def test_generated_updates_match_torch(name, n, dtype, transposed):
    """Any size, half dtypes, and parameters that are views (a transposed matrix: not compact, so the
    kernel writes a compact copy that is copied back)."""
    shape = (2, max(n // 2, 1)) if transposed else (n,)
    layout = (lambda t: t.t().contiguous().t()) if transposed else (lambda t: t)
    if name in ("shifted", "rolled") and transposed:
        return  # flip(0)/roll(1) of a matrix are other programs; the 1-d cases cover them
    _check(name, shape, dtype, layout)


def test_a_parameter_passed_twice_reads_its_old_values():
    """grad is param itself: the in-place kernel gets a copy of param (torch reads the old values)."""
    p, b = torch.randn(777), torch.randn(777)
    q, c = p.clone(), b.clone()
    _step("sgd_momentum", [p, p, b], True)
    _step("sgd_momentum", [q, q, c], False)
    torch.testing.assert_close(p, q)
    torch.testing.assert_close(b, c)


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_cuda_kernels_write_in_place_where_safe(name):
    """On a GPU too the kernel is scheduled computing a new value, then writes it into the parameter;
    every update of the optimizers."""
    args = [torch.empty(1 << 20, device="meta") for _ in _inputs(name, (1,), torch.float32, torch.Generator())]
    k = bt.jit(target=SM90)(globals()[name]).compile(*args)
    schedule = k.stages["schedule"]
    assert ("call_tir_inplace" in schedule) == (name in IN_PLACE), schedule[-1500:]
    if name in ("sgd_momentum", "adam_like"):   # no parameter copied back: every result written in place
        assert "inplace_indices=[-1" not in schedule and ", -1]" not in schedule, schedule[-1500:]
    assert all(kernel.rule != "dlight.gpu.Fallback" for kernel in k.fusion), str(k.fusion)
    if shutil.which("nvcc"):
        sys.path.insert(0, str(Path(__file__).parents[1] / "schedules"))
        from test_schedules import nvcc_ptx
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(COMPILED))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_updates_match_torch(name, dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    mine = [t.to(dtype) for t in (torch.randn(1 << 20, device="cuda", generator=gen) for _ in range(4))]
    mine = mine[:len(_inputs(name, (1,), torch.float32, torch.Generator()))]
    if name == "adam_like":
        mine[3] = mine[3].abs()
    theirs = [t.clone() for t in mine]
    fn = bt.jit(target="gpu")(globals()[name])
    with torch.no_grad():
        got, want = fn(*mine), globals()[name](*theirs)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b, **tol)
    if want is not None:
        torch.testing.assert_close(got, want, **tol)
