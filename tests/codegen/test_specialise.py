"""Unannotated number parameters the code needs as compile-time values are specialised, as
torch.compile specialises ints: one version per value (arguments.Specialise); numbers used only as
tensor values stay run-time scalars (one version for every value). torch is the oracle."""
import re

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton import CompilationError


def repeat_kv(k, n_rep):
    """A plain helper, inlined: its int comes from the caller's parameter."""
    B, H, T, D = k.shape
    return k[:, :, None, :, :].expand(B, H, n_rep, T, D).reshape(B, H * n_rep, T, D)


@bt.jit
def patchify(x, p=4):
    B, C, H, W = x.shape
    return x.reshape(B, C, H // p, p, W // p, p)


@bt.jit
def topk(probs, top_k):
    k = min(top_k, probs.size(-1))
    return torch.topk(probs, k, dim=-1).values


@bt.jit
def window(x, start_pos, T):
    return x[:, start_pos:start_pos + T]


@bt.jit
def rkv(k, n_rep):
    return repeat_kv(k, n_rep)


@bt.jit
def heads(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


@bt.jit
def shrink(x, n):
    for _ in range(n):   # the carried tensor changes shape: the loop is unrolled per value of n
        x = x[:, 1:] * 2
    return x


@bt.jit
def tiles(x, n):
    return torch.cat([x * i for i in range(n)], dim=0)   # a comprehension over range(n): unrolled


@bt.jit
def branch(x, flag):
    if flag:             # the paths have different shapes: picked at compile time
        return x[:2]
    return x


@bt.jit
def sgd(w, g, lr=0.1):
    return w - lr * g


def t_patchify(x, p=4):
    B, C, H, W = x.shape
    return x.reshape(B, C, H // p, p, W // p, p)


def t_heads(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def t_shrink(x, n):
    for _ in range(n):
        x = x[:, 1:] * 2
    return x


X4 = torch.randn(2, 3, 8, 8)
PROBS = torch.randn(3, 10)
SEQ = torch.randn(2, 10)
KV = torch.randn(2, 2, 3, 4)
HID = torch.randn(2, 3, 8)
ROW = torch.randn(3, 6)

# (function, its torch twin, the arguments for two values of the int)
IDIOMS = [
    (patchify, t_patchify, [(X4,), (X4, 2)]),
    (topk, lambda p, k: torch.topk(p, min(k, p.size(-1)), dim=-1).values, [(PROBS, 3), (PROBS, 12)]),
    (window, lambda x, s, t: x[:, s:s + t], [(SEQ, 2, 3), (SEQ, 5, 4)]),
    (rkv, repeat_kv, [(KV, 1), (KV, 3)]),
    (heads, t_heads, [(HID, 2), (HID, 4)]),
    (shrink, t_shrink, [(ROW, 1), (ROW, 3)]),
    (tiles, lambda x, n: torch.cat([x * i for i in range(n)], dim=0), [(ROW, 2), (ROW, 3)]),
    (branch, lambda x, f: x[:2] if f else x, [(ROW, True), (ROW, False)]),
]


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("fn, twin, calls", IDIOMS, ids=[i[0].__name__ for i in IDIOMS])
def test_idiom_one_version_per_value(fn, twin, calls):
    for args in calls + calls[:1]:   # the first value again: its version is found, not compiled
        same(fn(*args), twin(*args))
        same(fn.eager(*args), twin(*args))
    assert fn.cache_info()["versions"] == 2
    assert fn.info.specialised   # remembered: later calls key on the value


@bt.jit
def split_heads(x, n):
    """A @jit callee: inlined, its number specialised for the call that needs it at compile time."""
    B, T, C = x.shape
    hd = C // n
    return x.view(B, T, n, hd)


def test_jit_callee_needing_its_number():
    @bt.jit
    def passes_parameter(x, n_head):
        return split_heads(x, n_head) * 2

    @bt.jit
    def passes_literal(x):
        return split_heads(x, 4) + 1

    for n in (2, 4):
        same(passes_parameter(HID, n), HID.view(2, 3, n, 8 // n) * 2)
        same(passes_parameter.eager(HID, n), HID.view(2, 3, n, 8 // n) * 2)
    assert passes_parameter.cache_info()["versions"] == 2
    same(passes_literal(HID), HID.view(2, 3, 4, 2) + 1)
    same(passes_literal.eager(HID), HID.view(2, 3, 4, 2) + 1)
    same(split_heads(HID, 2), HID.view(2, 3, 2, 4))   # called directly too


@bt.jit
def python_of_numbers(x, n):
    m = int(n) + max(n, 1)          # Python's int() and max() of a number used as a size
    return x.reshape(m, -1)[:, :n] + torch.arange(n)


def test_python_int_and_max_and_arange():
    x = torch.randn(4, 6)
    for n in (1, 2):
        want = x.reshape(2 * n, -1)[:, :n] + torch.arange(n)
        same(python_of_numbers(x, n), want)
        same(python_of_numbers.eager(x, n), want)
    assert python_of_numbers.cache_info()["versions"] == 2


def test_learning_rate_stays_run_time():
    w, g = torch.randn(5), torch.randn(5)
    for lr in (0.1, 0.01, 2.5):   # floats: one version (an int would key its own, by type)
        same(sgd(w, g, lr), w - lr * g)
    assert sgd.cache_info()["versions"] == 1 and not sgd.info.specialised


def test_specialised_and_run_time_together():
    @bt.jit
    def scaled_heads(x, n_head, scale):
        B, T, C = x.shape
        return x.view(B, T, n_head, C // n_head) * scale
    for n, s in [(2, 0.5), (2, 3.0), (4, 0.5)]:
        same(scaled_heads(HID, n, s), HID.view(2, 3, n, 8 // n) * s)
    assert scaled_heads.info.specialised == {"n_head"}
    assert scaled_heads.cache_info()["versions"] == 2


def test_gradients_through_specialised_shapes():
    for p in (2, 4):
        x = X4.clone().requires_grad_()
        ref = X4.clone().requires_grad_()
        (patchify(x, p) * torch.arange(X4.numel()).reshape(t_patchify(X4, p).shape)).sum().backward()
        (t_patchify(ref, p) * torch.arange(X4.numel()).reshape(t_patchify(X4, p).shape)).sum().backward()
        same(x.grad, ref.grad)


@settings(max_examples=8, deadline=None)
@given(k=st.integers(1, 12), start=st.integers(-12, 12), length=st.integers(0, 12))
def test_generated_ints(k, start, length):
    probs = torch.randn(4, 9, dtype=torch.float16)
    same(topk(probs, k), torch.topk(probs, min(k, 9), dim=-1).values)
    same(window(SEQ, start, length), SEQ[:, start:start + length])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32])
def test_dtypes_and_special_values(dtype):
    x = torch.tensor([[1.0, float("nan"), float("inf"), -2.0]]).to(dtype) if dtype.is_floating_point \
        else torch.arange(8, dtype=dtype).reshape(2, 4)
    for n in (1, 2):
        same(rkv(x[None, None], n), repeat_kv(x[None, None], n))
    empty = torch.randn(0, 3, 8, dtype=torch.float32)
    same(heads(empty, 2), t_heads(empty, 2))


def test_annotated_int_specialises_where_needed_and_float_says_why_not():
    @bt.jit
    def annotated(x, n: int, s: float):
        return x.reshape(n, -1) * s
    for n in (1, 2):
        torch.testing.assert_close(annotated(ROW, n, 0.5), ROW.reshape(n, -1) * 0.5)

    @bt.jit
    def float_size(x, s: float):
        return x.reshape(s, -1)
    with pytest.raises(CompilationError) as info:
        float_size(ROW, 2.0)
    text = str(info.value)
    assert "'s' is a run-time float" in text and "takes an int" in text
    assert re.search(r"test_specialise\.py:\d+:\d+", text) and "^" in text
    assert "tvm" not in text.lower()


def test_float_sizes_are_still_an_error():
    @bt.jit
    def float_size(x, n):
        return x.reshape(n, -1)
    with pytest.raises(CompilationError, match="sizes must be ints.*float 2.0"):
        float_size(ROW, 2.0)
    same(float_size(ROW, 2), ROW.reshape(2, -1))   # an int for the same parameter works


def test_constexpr_unchanged():
    @bt.jit
    def fixed(x, p: bt.constexpr):
        return x.reshape(-1, p)
    same(fixed(ROW, 3), ROW.reshape(-1, 3))
    assert not fixed.info.specialised


def test_torch_compile_interplay():
    compiled = torch.compile(lambda x: patchify(x, 2) * 2, backend="eager", fullgraph=True)
    same(compiled(X4), t_patchify(X4, 2) * 2)
