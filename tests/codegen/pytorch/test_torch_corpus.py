"""PyTorch code as written (tests/torch_corpus.py) under @bt.jit: each case's compiled call must give
what torch gives.

Per case:
- test_sanity_*: the corpus itself under plain torch, no babytriton involved (deterministic inputs,
  the declared in-place arguments are the ones torch writes, the declared gradients exist);
- test_forward: bt.jit(fn)(*inputs) == fn(*inputs) (per-case tolerance for floats, integer and bool
  results exactly, dtypes and shapes equal, tuples element for element);
- test_inplace: the arguments named in `inplace` hold afterwards what torch's in-place ops wrote,
  and every other argument is untouched;
- test_backward: where `grad` is set, the gradients of sum(output * fixed random weights) with
  respect to the chosen inputs;
- test_eager: bt.jit(fn).eager(*inputs), results and in-place arguments;
- test_kernels: where `kernels` is set, len(bt.jit(fn).compile(*inputs).fusion) is at most that;
- test_gpu_forward / test_gpu_backward: the same on CUDA inputs with target="gpu".

Each side gets fresh inputs from the case's make_inputs (a fixed seed), so in-place functions start
from the same state. The jitted functions are made once per module (_JITTED), so the forward, in-place,
eager and kernel tests share one compiled version per case.
"""
import inspect

import pytest
import torch

import babytriton as bt
from torch_corpus import CATEGORIES, CORPUS, DEFAULT_GRAD_TOL, DEFAULT_TOL

BY_NAME = {case.name: case for case in CORPUS}
IDS = [case.name for case in CORPUS]
GRAD_CASES = [case for case in CORPUS if case.grad]
KERNEL_CASES = [case for case in CORPUS if case.kernels is not None]
HAS_CUDA = torch.cuda.is_available()

_JITTED = {}


def jitted(case, target="cpu"):
    key = (case.name, target)
    if key not in _JITTED:
        _JITTED[key] = bt.jit(case.fn, target=target)
    return _JITTED[key]


def param_names(case):
    return list(inspect.signature(case.fn).parameters)


def as_tuple(out):
    """A function's results as a flat tuple (a namedtuple from torch.max(dim=...) is a tuple too)."""
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


def tol_for(dtype, tol, defaults):
    """(rtol, atol) for a floating-point result: the case's tol for float32, for other dtypes the
    larger of the case's and the dtype's default."""
    rtol, atol = defaults.get(dtype, (0.0, 0.0))
    if tol is None:
        return rtol, atol
    if dtype == torch.float32:
        return tol
    return max(rtol, tol[0]), max(atol, tol[1])


def assert_same(actual, expected, tol=None, defaults=DEFAULT_TOL, what="result"):
    """Tensors: same dtype, shape and device type; floats within (rtol, atol) (per-case tol for
    float32, at least the dtype's default otherwise), integers and bools exactly. Tuples element for
    element, None is None, Python numbers equal."""
    if expected is None:
        assert actual is None, f"{what}: expected None, got {type(actual).__name__}"
        return
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{what}: expected a tuple, got {type(actual).__name__}"
        assert len(actual) == len(expected), f"{what}: {len(actual)} results, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, tol, defaults, f"{what}[{i}]")
        return
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
        assert actual.device.type == expected.device.type, f"{what}: on {actual.device}, expected {expected.device}"
        a, e = actual.detach().cpu(), expected.detach().cpu()
        if e.is_floating_point() or e.is_complex():
            rtol, atol = tol_for(e.dtype, tol, defaults)
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")
        else:
            mismatch = (a != e).sum().item()
            assert mismatch == 0, f"{what}: {mismatch} of {e.numel()} elements differ (exact {e.dtype} expected)"
        return
    assert actual == expected, f"{what}: {actual!r}, expected {expected!r}"


def grad_indices(case, args):
    """The positions of the arguments to differentiate: every floating-point tensor for grad=True,
    else the named ones."""
    names = param_names(case)
    if case.grad is True:
        return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    return [names.index(name) for name in case.grad]


def output_weights(outs, device):
    """Fixed random weights, one per floating-point result (None for the others)."""
    g = torch.Generator().manual_seed(1234)
    weights = []
    for o in outs:
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            weights.append(torch.randn(o.shape, generator=g).to(o.dtype).to(device))
        else:
            weights.append(None)
    return weights


def gradients(fn, case, device):
    """Gradients of sum(output * weights) with respect to the chosen inputs (zeros where unused)."""
    args = list(case.make_inputs(device))
    chosen = grad_indices(case, args)
    for i in chosen:
        args[i] = args[i].detach().clone().requires_grad_(True)
    outs = as_tuple(fn(*args))
    weights = output_weights(outs, device)
    terms = [(o * w).float().sum() for o, w in zip(outs, weights) if w is not None]
    assert terms, "no floating-point result to differentiate"
    loss = torch.stack(terms).sum()
    inputs = [args[i] for i in chosen]
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads))


def run_and_compare(call, case, device="cpu"):
    """call(*fresh inputs) against case.fn(*fresh inputs): results, then every argument afterwards
    (in-place ones updated as torch updates them, the others untouched)."""
    ref_args = case.make_inputs(device)
    expected = case.fn(*ref_args)
    args = case.make_inputs(device)
    actual = call(*args)
    assert_same(actual, expected, case.tol)
    return args, ref_args


def compare_arguments(case, args, ref_args):
    for name, a, e in zip(param_names(case), args, ref_args):
        if not isinstance(e, torch.Tensor):
            continue
        if name in case.inplace:
            assert_same(a, e, case.tol, what=f"argument `{name}` (updated in place)")
        else:  # bit for bit: nothing may write it
            assert_same(a, e, (0.0, 0.0), {}, what=f"argument `{name}` (must be left untouched)")


# ------------------------------------------------------------------------------------------------
# the corpus itself, under plain torch
# ------------------------------------------------------------------------------------------------

def test_sanity_registry():
    assert len(CORPUS) >= 60
    assert len(BY_NAME) == len(CORPUS), "case names must be unique"
    assert {case.category for case in CORPUS} == set(CATEGORIES)
    for case in CORPUS:
        names = param_names(case)
        assert set(case.inplace) <= set(names), case.name
        if case.grad not in (True, False):
            assert set(case.grad) <= set(names), case.name
        assert not (case.grad and case.inplace), f"{case.name}: optimizer steps are not differentiated"
        assert case.kernels is None or case.kernels >= 1


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_sanity_torch(case):
    args = case.make_inputs("cpu")
    again = case.make_inputs("cpu")
    assert_same(again, args, (0.0, 0.0), {}, what="make_inputs (deterministic)")
    originals = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    out = case.fn(*args)
    # deterministic: a second run on fresh inputs gives the same results bit for bit
    assert_same(case.fn(*case.make_inputs("cpu")), out, (0.0, 0.0), {}, what="second torch run")
    # in-place arguments are exactly the ones torch writes
    for name, a, o in zip(param_names(case), args, originals):
        if isinstance(a, torch.Tensor):
            changed = not torch.equal(a, o)
            assert changed == (name in case.inplace), \
                f"`{name}` {'changed' if changed else 'unchanged'}; inplace={case.inplace}"
    results = as_tuple(out)
    if case.grad:
        chosen = grad_indices(case, list(args))
        assert chosen and all(args[i].is_floating_point() for i in chosen)
        grads = gradients(case.fn, case, "cpu")
        assert any(g.abs().sum() > 0 for g in grads), "every gradient is zero"
        assert all(torch.isfinite(g).all() for g in grads)
    if case.inplace:
        assert all(r is None or isinstance(r, torch.Tensor) for r in results)


# ------------------------------------------------------------------------------------------------
# babytriton on the CPU
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_forward(case):
    run_and_compare(jitted(case), case)


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_inplace(case):
    """The arguments named in `inplace` updated as torch updates them; all others untouched."""
    args, ref_args = run_and_compare(jitted(case), case)
    compare_arguments(case, args, ref_args)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.name for c in GRAD_CASES])
def test_backward(case):
    expected = gradients(case.fn, case, "cpu")
    actual = gradients(jitted(case), case, "cpu")
    assert_same(actual, expected, case.grad_tol or case.tol and tuple(10 * t for t in case.tol),
                DEFAULT_GRAD_TOL, what="gradient")


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_eager(case):
    args, ref_args = run_and_compare(jitted(case).eager, case)
    compare_arguments(case, args, ref_args)


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.name for c in KERNEL_CASES])
def test_kernels(case):
    k = jitted(case).compile(*case.make_inputs("cpu"))
    kernels = list(k.fusion)
    assert len(kernels) <= case.kernels, \
        f"{len(kernels)} kernels, expected at most {case.kernels}:\n{k.fusion}"


# ------------------------------------------------------------------------------------------------
# babytriton on a GPU
# ------------------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_gpu_forward(case):
    args, ref_args = run_and_compare(jitted(case, "gpu"), case, "cuda")
    compare_arguments(case, args, ref_args)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.name for c in GRAD_CASES])
def test_gpu_backward(case):
    expected = gradients(case.fn, case, "cuda")
    actual = gradients(jitted(case, "gpu"), case, "cuda")
    assert_same(actual, expected, case.grad_tol or case.tol and tuple(10 * t for t in case.tol),
                DEFAULT_GRAD_TOL, what="gradient")
