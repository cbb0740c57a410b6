"""The launch fast path (babytriton/triton/launcher.py): a launch keyed like an earlier one skips binding
and typing, with the same results as torch; what changes the specialisation (dtypes, constexprs, ints
equal to 1, number types, launch options) still takes the slow path and compiles anew."""
from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton.triton as triton
from babytriton.runtime import threads
from babytriton.triton import launcher

import kernels

triton_jit = importlib.import_module("babytriton.triton.jit")   # the module (triton.jit is the decorator)


@pytest.fixture
def add():
    """A fresh add kernel: no launches remembered."""
    return triton.jit(kernels.add_kernel.fn)


def _launch(kernel, x, y, block=64, **options):
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel(), BLOCK_SIZE=block,
                                                                        **options)
    return out


def _slow_path_fails(monkeypatch):
    def fail(*_args, **_kwargs):
        raise AssertionError("the slow path ran")
    monkeypatch.setattr(triton_jit.JITFunction, "_split", fail)


def test_a_second_launch_takes_the_fast_path_with_new_tensors_and_sizes(add, monkeypatch):
    x, y = torch.randn(300), torch.randn(300)
    assert torch.equal(_launch(add, x, y), x + y)
    _slow_path_fails(monkeypatch)
    for n in (300, 77, 1000):   # new tensors and sizes: the same key (the grid follows the size)
        x, y = torch.randn(n), torch.randn(n)
        assert torch.equal(_launch(add, x, y), x + y)
    x = torch.randn(4, 50)      # a 2-D contiguous tensor and one that requires grad
    assert torch.equal(_launch(add, x, x.clone()), x + x)
    w = torch.randn(200, requires_grad=True)
    assert torch.equal(_launch(add, w, w), (w + w).detach())
    assert len(add.launchers) == 1


@pytest.mark.parametrize("change", ["dtype", "block", "one", "warps"])
def test_what_changes_the_specialisation_takes_the_slow_path(add, change, monkeypatch):
    x, y = torch.randn(300), torch.randn(300)
    _launch(add, x, y)
    calls = []
    split = triton_jit.JITFunction._split
    monkeypatch.setattr(triton_jit.JITFunction, "_split", lambda self, *a: calls.append(1) or split(self, *a))
    if change == "dtype":
        x, y = x.half(), y.half()
        assert torch.equal(_launch(add, x, y), x + y)
    elif change == "block":
        assert torch.equal(_launch(add, x, y, block=128), x + y)
    elif change == "one":       # n_elements == 1 is specialised, as Triton's equal_to_1
        x, y = x[:1].clone(), y[:1].clone()
        assert torch.equal(_launch(add, x, y), x + y)
    else:
        assert torch.equal(_launch(add, x, y, num_warps=2), x + y)
    assert calls == [1] and len(add.launchers) == 2


def test_number_types_key_apart(monkeypatch):
    kernel = triton.jit(kernels.scale_shift_kernel.fn)
    x = torch.randn(100)
    for alpha in (3.0, 3, 2.5, -1):   # an int and a float argument are typed apart
        out = torch.empty_like(x)
        kernel[(3,)](x, out, x.numel(), alpha, 0.5, BLOCK=32)
        torch.testing.assert_close(out, alpha * x + 0.5)
    assert len(kernel.launchers) == 2


def test_the_remembered_launches_are_bounded(add, monkeypatch):
    monkeypatch.setattr(launcher, "MAX_LAUNCHERS", 2)
    x = torch.randn(64)
    for block in (16, 32, 64):
        assert torch.equal(_launch(add, x, x, block=block), x + x)
    assert len(add.launchers) == 2


def test_a_wrong_launch_is_still_refused(add):
    x = torch.randn(8)
    _launch(add, x, x)
    with pytest.raises(TypeError, match="launching add_kernel"):
        add[(1,)](x, x, x, 8, 16, 32)


def test_a_constexpr_keys_by_type_and_value_wrapped_or_not():
    """Plain ints and bools take a shortcut past the Tensor check; a tl.constexpr keys as its value."""
    import babytriton.triton.language as tl

    def key(value):
        return launcher.launch_key((value,), {}, (True,), frozenset())
    assert key(4) == key(tl.constexpr(4)) == ((int, 4),)
    assert len({key(4), key(5), key(True), key(1), key(4.0)}) == 5


_VALUES = st.one_of(st.integers(-2 ** 64, 2 ** 64), st.sampled_from([1, 0, -1, 2 ** 31 - 1, 2 ** 31, -2 ** 31,
                                                                    -2 ** 31 - 1, 2 ** 63 - 1, 2 ** 63]),
                    st.floats(allow_nan=False), st.booleans(), st.none(), st.text(max_size=3),
                    st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool]).map(
                        lambda d: torch.zeros(2, dtype=d)))


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES, max_size=5), st.dictionaries(st.sampled_from(["B", "n", "num_warps"]), _VALUES, max_size=3),
       st.lists(st.booleans(), min_size=4, max_size=4))
def test_the_generated_launch_key_is_launch_key(args, kwargs, exact):
    # launcher.keyer inlines each argument's part of the key: the same key for every kind of value
    exact, by_value = tuple(exact), frozenset({"B", "num_warps"})
    got = launcher.keyer(len(args), tuple(kwargs), exact, by_value)(tuple(args), kwargs)
    assert got == launcher.launch_key(tuple(args), kwargs, exact, by_value)



@pytest.mark.parametrize("n, block, team", [(1000, 256, 1), (threads.GRAIN, 1024, 1), (threads.GRAIN + 1, 1024, 2),
                                            (5 * threads.GRAIN - 7, 4096, 2)])
def test_a_launch_wakes_no_more_threads_than_its_elements_need(add, n, block, team):
    # threads.GRAIN elements a thread at least, as torch's own loops: a small launch runs on fewer
    if threads._launcher()[0] is None:
        pytest.skip(f"no OpenMP team here: {threads.pool()}")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(_launch(add, x, y, block), x + y)
        assert threads._launcher()[0].bt_threads() == team
        rows = torch.randn(3, n)   # programs that loop a run-time number of times: the whole team
        w, b = torch.randn(n), torch.randn(n)
        got = kernels.layer_norm(rows, w, b, BLOCK_SIZE=256)[0]
        torch.testing.assert_close(got, torch.nn.functional.layer_norm(rows, (n,), w, b, 1e-5), atol=1e-4, rtol=1e-4)
        assert threads._launcher()[0].bt_threads() == 2
    finally:
        torch.set_num_threads(before)
