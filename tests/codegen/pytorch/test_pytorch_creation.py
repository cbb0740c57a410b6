"""torch's tensor constructors under @jit (babytriton/codegen/pytorch/creation.py): compiled and eager
results against plain torch (values, shapes, dtypes), symbolic sizes, `x.device`, and the errors."""
import re

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton import CompilationError


def constructors(x, s: float):
    """x (n, 6); s a run-time float. Everything but the empty ones (whose values are undefined)."""
    n = x.shape[0]
    f16, i32 = torch.float16, torch.int32
    ranges = (torch.arange(5), torch.arange(2, 9, 3), torch.arange(n), torch.arange(1, n + 1, 2),
              torch.arange(0, 1, 0.1), torch.arange(0.5, 3), torch.arange(10, 0, -3), torch.arange(5, dtype=f16),
              torch.arange(-1.0, 1.0, 0.25, dtype=torch.float64), torch.arange(3, 3), torch.linspace(0, 1, 5),
              torch.linspace(-3, 7.5, 11), torch.linspace(0, 1, 1), torch.linspace(2, 3, 0),
              torch.linspace(1, 0, 7, dtype=torch.float64))
    filled = (torch.zeros(2, 3), torch.zeros((2, 3), dtype=i32), torch.ones(x.shape), torch.ones(*x.shape[:-1], 1),
              torch.zeros(n, 0), torch.full((2, 3), 7), torch.full((2,), True), torch.full((n, 2), 1.5, dtype=f16),
              torch.full((2,), 2.5, dtype=torch.int64), torch.full((2,), s), torch.full([1, n], float("nan")),
              torch.full((2,), float("-inf"), dtype=torch.bfloat16), torch.zeros_like(x),
              torch.ones_like(x, dtype=torch.int64), torch.full_like(x, 3), torch.full_like(x, 2.7, dtype=i32),
              x.new_zeros(2, 3), x.new_ones((2,)), x.new_full((2, n), -1), x.new_zeros(n, dtype=torch.bool),
              torch.eye(3), torch.eye(2, 4, dtype=i32), torch.eye(n), torch.eye(n, 2), torch.tril(torch.ones(n, n)),
              torch.triu(torch.ones(3, 3, dtype=torch.bool), 1), torch.zeros(3, device=x.device),
              torch.ones(2, device="cpu"), torch.arange(n, device=x.device) * 2 + x.sum(1).long(), x + torch.arange(6))
    data = (x.new_tensor([1, 2]), torch.tensor([1, 2, 3]), torch.tensor([[1.5, 2], [3, 4]]), torch.tensor(2.5),
            torch.tensor(True), torch.tensor([0.1, 0.2], dtype=torch.bfloat16), torch.tensor([]),
            torch.tensor(7, dtype=torch.int8), torch.tensor([[1e300]]),
            torch.tensor([float("nan"), -0.0, float("inf")]),
            torch.tensor([1, 2.5], dtype=f16), torch.tensor([True, False]), torch.tensor([[1, 2]], dtype=torch.float64))
    return ranges + filled + data


def empties(x):
    return torch.empty(2, 3), torch.empty_like(x), x.new_empty(3), torch.empty((x.shape[0],), dtype=torch.int8)


CONSTRUCTORS, EMPTIES = bt.jit(constructors), bt.jit(empties)


@bt.jit
def constructors_n(x: bt.Tensor(("n", 6)), s: float):
    return CONSTRUCTORS(x, s)


@pytest.mark.parametrize("n", [3, 1, 0])
def test_constructors_match_torch(n):
    x = torch.randn(n, 6)
    want = constructors(x, 0.3)
    for fn in (constructors_n, CONSTRUCTORS):
        for got in (fn(x, 0.3), fn.eager(x, 0.3)):
            assert len(got) == len(want)
            for k, (g, w) in enumerate(zip(got, want)):
                assert (g.dtype, g.shape, g.device) == (w.dtype, w.shape, w.device), k
                torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"output {k}: {m}")


def test_empty_ones_have_torchs_shapes_and_dtypes():
    x = torch.randn(4, 6)
    for got in (EMPTIES(x), EMPTIES.eager(x)):
        for g, w in zip(got, empties(x), strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape


@bt.jit
def ranges(start: bt.constexpr, end: bt.constexpr, step: bt.constexpr, n: bt.constexpr):
    return torch.arange(start, end, step), torch.linspace(start, end, n), torch.arange(end)


@settings(max_examples=12, deadline=None)
@given(st.one_of(st.integers(-20, 20), st.floats(-20, 20).map(lambda v: round(v, 3))),
       st.one_of(st.integers(-20, 20), st.floats(-20, 20).map(lambda v: round(v, 3))),
       st.one_of(st.integers(1, 7), st.sampled_from([0.1, 0.25, 0.3, 1.5, 3.7])), st.booleans(), st.integers(0, 9))
def test_generated_ranges_match_torch(start, end, step, down, n):
    step = -step if down else step
    if (end - start) * step < 0 or end < 0:
        return
    want = (torch.arange(start, end, step), torch.linspace(start, end, n), torch.arange(end))
    for got in (ranges(start, end, step, n), ranges.eager(start, end, step, n)):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            # torch's vectorised CPU kernels add float32 steps within a vector (as many as the CPU's lanes):
            # an ulp from start + i * step computed once, as here and in torch's scalar loop
            torch.testing.assert_close(g, w, rtol=1.2e-7, atol=1e-7)


@bt.jit
def where_it_runs(x):
    return x.device == torch.device("cpu"), torch.zeros(2, device=x.device)


def test_device_is_the_functions_device():
    x = torch.randn(2)
    same, zeros = where_it_runs(x)
    assert bool(same) and zeros.device == x.device
    same, zeros = where_it_runs.eager(x)
    assert bool(same) and zeros.device == x.device


# -- errors ---------------------------------------------------------------------------------------
def bad_device(x):
    return torch.zeros(2, device="cuda")


def bad_requires_grad(x):
    return torch.ones(2, requires_grad=True)


def bad_random(x):
    return torch.rand_like(x)


def bad_negative(x):
    return torch.zeros(2, -1)


def bad_step(x):
    return torch.arange(0, 5, 0)


def bad_sign(x):
    return torch.arange(5, 0)


def bad_overflow(x):
    return torch.full((2,), 300, dtype=torch.int8)


def bad_data(x: bt.Tensor(("n", 3))):
    return torch.tensor([x.shape[0], 2])


def bad_layout(x):
    return torch.zeros(2, layout=torch.sparse_coo)


def bad_eye(x):
    return torch.eye(-1)


@pytest.mark.parametrize("fn, words", [
    (bad_device, "device='cuda' is not the device this code runs on (cpu)"),
    (bad_requires_grad, "requires_grad=True is not supported in @jit code"),
    (bad_random, "torch.rand_like(): @jit code has no random number generator"),
    (bad_negative, "Trying to create tensor with negative dimension -1: [2, -1]"),
    (bad_step, "step must be nonzero"),
    (bad_sign, "upper bound and lower bound inconsistent with step sign"),
    (bad_overflow, "value cannot be converted to type int8_t without overflow"),
    (bad_data, "torch.tensor() takes numbers (or nested lists of them) known when compiling"),
    (bad_layout, "layout=torch.sparse_coo is not supported in @jit code"),
    (bad_eye, "n must be greater or equal to 0, got -1"),
])
def test_errors_are_located(fn, words):
    x = torch.randn(2, 3)
    with pytest.raises(CompilationError) as info:
        bt.jit(fn)(x)
    text = str(info.value)
    assert words in text and "tvm" not in text.lower() and "test_pytorch_creation.py:" in text
    if fn is not bad_data:  # eager: sizes are ints there, so torch.tensor([n, 2]) is data
        with pytest.raises(TypeError, match=re.escape(words)):
            bt.jit(fn).eager(x)
