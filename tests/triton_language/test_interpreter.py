"""Interpret mode (BABYTRITON_INTERPRET=1): every kernel of kernels.py against torch at ragged sizes and
in each dtype it takes, strided views, C's integer division, printing, autotune/heuristics, and bad
programs failing with a CompilationError at the kernel's line."""
import re
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

import babytriton.triton as triton
import babytriton.triton.language as tl
from babytriton.core.errors import CompilationError, Diagnostic
from babytriton.triton import semantics

import kernels as K

TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=1e-2, rtol=1e-2),
       torch.bfloat16: dict(atol=8e-2, rtol=2e-2), torch.int32: dict(atol=0, rtol=0)}


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("BABYTRITON_INTERPRET", "1")


def check(out, ref):
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), equal_nan=True, **TOL[o.dtype])


@pytest.mark.parametrize("name, dtype", [(n, d) for n, c in K.CASES.items() for d in c.dtypes])
def test_kernel_equals_torch_at_a_ragged_size(name, dtype):
    case = K.CASES[name]
    args = case.make(dtype, 37, torch.Generator().manual_seed(0))
    check(case.run(*args), case.ref(*args))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), block=st.sampled_from([16, 64, 128]), dtype=st.sampled_from([torch.float32,
                                                                                             torch.float16]))
def test_vector_add_any_size(n, block, dtype):
    x, y = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    check(K.add(x, y, BLOCK_SIZE=block), x + y)


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 70), programs=st.integers(1, 4))
def test_fused_softmax_any_shape(rows, cols, programs):
    x = torch.randn(rows, cols)
    check(K.softmax(x, num_programs=programs), torch.softmax(x, dim=1))


def test_nan_and_inf_flow_like_torch():
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    check(K.add(x, x, BLOCK_SIZE=4), x + x)
    rows = torch.tensor([[0.0, float("inf"), 1.0], [1.0, 2.0, float("nan")]])
    check(K.softmax(rows), torch.softmax(rows, dim=1))


def test_strided_views_and_storage_offsets():
    big = torch.randn(9, 50)
    x = big[2:7, 3:40]  # a view: storage offset 103, row stride 50
    check(K.softmax(x), torch.softmax(x, dim=1))
    w, b = torch.rand(50), torch.rand(50)
    rows = big[2:7]  # whole rows from the third: a storage offset of 100
    check(K.layer_norm(rows, w, b, 1e-5, 16), K.layer_norm_ref(rows, w, b, 1e-5))
    # the tutorial's wrapper gives Y (empty_like: contiguous) X's row stride: the interpreter says so
    with pytest.raises(CompilationError, match="out-of-bounds tl.store: element 185 of `Y`"):
        K.layer_norm(x, w[:37], b[:37], 1e-5, 16)
    a, bt = torch.randn(20, 33).half(), torch.randn(40, 33).half()
    check(K.matmul(a, bt.T), K.matmul_ref(a, bt.T))  # B transposed: strides (1, 33)


@triton.jit
def int_ops_kernel(a_ptr, b_ptr, q_ptr, r_ptr, s_ptr, u_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    tl.store(q_ptr + offs, a // b, mask=mask)
    tl.store(r_ptr + offs, a % b, mask=mask)
    tl.store(s_ptr + offs, (a >> 1) ^ (a << 2) | (b & 5), mask=mask)
    tl.store(u_ptr + offs, (a.to(tl.uint8) >> 1).to(tl.int32) + (-7 // 2) * 100, mask=mask)


def test_integer_division_truncates_like_c():
    a = torch.tensor([-7, 7, -7, 7, -9, 0, 5], dtype=torch.int32)
    b = torch.tensor([2, -2, -2, 2, 4, 3, 1], dtype=torch.int32)
    q, r, s, u = (torch.empty_like(a) for _ in range(4))
    int_ops_kernel[(1,)](a, b, q, r, s, u, a.numel(), BLOCK=8)
    assert q.tolist() == torch.div(a, b, rounding_mode="trunc").tolist() == [-3, -3, 3, 3, -2, 0, 5]
    assert r.tolist() == torch.fmod(a, b).tolist() == [-1, 1, -1, 1, -1, 0, 0]
    assert s.tolist() == (((a >> 1) ^ (a << 2)) | (b & 5)).tolist()
    # uint8 shifts are logical; Python ints (constexpr arithmetic) keep Python's floor: -7 // 2 == -4
    assert u.tolist() == ((a.to(torch.uint8) >> 1).to(torch.int32) - 400).tolist()


@triton.jit
def select_kernel(x_ptr, keep_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = tl.load(keep_ptr + offs, mask=offs < n, other=False)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.where(keep, tl.abs(x), -1), mask=offs < n)


def test_boolean_tensors_and_implicit_store_casts():
    x, keep = torch.randn(21), torch.rand(21) > 0.5
    out = torch.empty(21, dtype=torch.float16)
    select_kernel[(3,)](x, keep, out, 21, BLOCK=8)
    assert torch.equal(out, torch.where(keep, x.abs(), -1.0).half())


@triton.jit
def bitcast_kernel(x_ptr, h_ptr, top_ptr, f_ptr, back_ptr, hf_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    u = x.to(tl.uint32, bitcast=True)
    tl.store(top_ptr + offs, (u >> 28).to(tl.int32))   # a logical shift: the sign bit is not repeated
    tl.store(f_ptr + offs, x.to(tl.float32, bitcast=True))
    tl.store(back_ptr + offs, u.to(tl.float32, bitcast=True).to(tl.int32, bitcast=True))
    h = tl.load(h_ptr + offs)
    tl.store(hf_ptr + offs, h.to(tl.uint16, bitcast=True).to(tl.float16, bitcast=True))


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_bitcasts_keep_the_bits(interpret, monkeypatch):
    """int32 <-> uint32 (held in int64 by the interpreter) <-> float32, int16 -> uint16 -> float16."""
    monkeypatch.setenv("BABYTRITON_INTERPRET", interpret)
    x = torch.tensor([-1, 2 ** 31 - 1, -2 ** 31, 0, 1065353216, -5, 123456789, 7], dtype=torch.int32)
    h = torch.tensor([-1, 15360, -32768, 0, 1, 31744, -1024, 12], dtype=torch.int16)
    top, back = torch.empty(8, dtype=torch.int32), torch.empty(8, dtype=torch.int32)
    f, hf = torch.empty(8), torch.empty(8, dtype=torch.float16)
    bitcast_kernel[(1,)](x, h, top, f, back, hf, BLOCK=8)
    assert torch.equal(top, ((x.long() & 0xFFFFFFFF) >> 28).int()) and torch.equal(back, x)
    assert torch.equal(f.view(torch.int32), x) and torch.equal(hf.view(torch.int16), h)


@triton.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))
    tl.device_print("x:", x)


def test_print_prints_each_program(capsys):
    print_kernel[(2,)](torch.arange(4.0), BLOCK=2)
    out = capsys.readouterr().out
    assert "pid (0, 0, 0) x: [0.0, 1.0]" in out and "pid (1, 0, 0) x: [2.0, 3.0]" in out


def test_autotune_picks_one_of_its_configs():
    a, b = torch.randn(24, 20).half(), torch.randn(20, 18).half()
    check(K.matmul(a, b), K.matmul_ref(a, b))
    assert K.matmul_kernel.best_config in K.matmul_kernel.configs


def test_autotune_resets_and_runs_pre_hooks():
    hooked = []
    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda args: hooked.append(args["BLOCK"])) for b in (8, 16)]
    tuned = triton.autotune(configs, key=["n"], reset_to_zero=["hist_ptr"])(triton.jit(K.histogram_kernel.fn))
    x = torch.randint(0, 4, (30,), dtype=torch.int32)
    hist, total = torch.zeros(4, dtype=torch.int32), torch.zeros(1)
    tuned[lambda meta: (triton.cdiv(30, meta["BLOCK"]),)](x, hist, total, 30, BINS=4)
    # every config ran once while tuning (hist zeroed before each), then the best once more
    assert sorted(hooked[:2]) == [8, 16] and len(hooked) == 3
    assert torch.equal(hist, torch.bincount(x.long(), minlength=4).int())


@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def heuristic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_heuristics_compute_meta_parameters():
    x = torch.randn(13)
    out = torch.empty_like(x)
    heuristic_kernel[(1,)](x, out, 13)
    assert torch.equal(out, x * 2)


def test_host_helpers():
    assert [triton.next_power_of_2(n) for n in (1, 2, 3, 17, 1024)] == [1, 2, 4, 32, 1024]
    assert triton.cdiv(10, 4) == 3 and triton.cdiv(8, 4) == 2
    assert triton.testing.do_bench(lambda: None, warmup=1, rep=3) >= 0


# --- bad programs -------------------------------------------------------------------------------------

@triton.jit
def unmasked_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x)


def _line_of(fn, text):
    lines, first = __import__("inspect").getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_out_of_bounds_access_names_the_line_and_program():
    x = torch.randn(10)
    with pytest.raises(CompilationError) as err:
        unmasked_kernel[(2,)](x, torch.empty_like(x), BLOCK=8)
    e = err.value
    assert e.filename == __file__ and e.lineno == _line_of(unmasked_kernel.fn, "tl.load(x_ptr + offs)")
    assert "out-of-bounds tl.load: element 10 of `x_ptr`, which has elements 0..9" in e.message
    assert "(in program (1, 0, 0))" in e.message and "^" in str(e)


@triton.jit
def bad_arange_kernel(x_ptr):
    tl.store(x_ptr + tl.arange(0, 10), 1.0)


@triton.jit
def half_exp_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.exp(tl.load(x_ptr + offs)))


@triton.jit
def unknown_name_kernel(x_ptr):
    tl.store(x_ptr, tl.make_block_ptr(x_ptr))


@triton.jit
def ambiguous_if_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    if x > 0:
        tl.store(x_ptr, 1.0)


@triton.jit
def static_assert_kernel(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 16, "BLOCK must be at least 16")


@triton.jit
def runtime_static_range_kernel(x_ptr, n):
    for i in tl.static_range(n):
        tl.store(x_ptr + i, 1.0)


@triton.jit
def bad_helper(x):
    return tl.log(x.to(tl.int32))


@triton.jit
def calls_bad_helper_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, bad_helper(tl.load(x_ptr + offs)))


@triton.jit
def int_index_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr, x[0])


@pytest.mark.parametrize("kernel, args, line, message", [
    (int_index_kernel, (4,), "x[0]", r"indexed only with `None` \(a new axis\) and `:`"),
    (runtime_static_range_kernel, (3,), "tl.static_range(n)", "static_range's bounds must be constexprs"),
    (calls_bad_helper_kernel, (4,), "return tl.log(", "tl.log takes fp32 or fp64, not int32"),
    (bad_arange_kernel, (), "tl.arange(0, 10)", "tl.arange's range must be a power of two|powers of two"),
    (half_exp_kernel, (4,), "tl.exp(", r"tl.exp takes fp32 or fp64, not fp16"),
    (unknown_name_kernel, (), "tl.make_block_ptr", "tl.make_block_ptr is not part of babytriton's Triton language"),
    (ambiguous_if_kernel, (4,), "if x > 0", r"the truth of a block of shape \[4\] is ambiguous"),
    (static_assert_kernel, (8,), "tl.static_assert", "static_assert failed: BLOCK must be at least 16"),
])
def test_bad_programs_fail_at_their_line(kernel, args, line, message):
    x = torch.zeros(16, dtype=torch.float16)
    with pytest.raises(CompilationError) as err:
        kernel[(1,)](x, *args)
    fn = bad_helper.fn if kernel is calls_bad_helper_kernel else kernel.fn  # the innermost kernel line
    assert err.value.lineno == _line_of(fn, line) and re.search(message, err.value.message)


def test_launch_mistakes_are_clear():
    x = torch.zeros(4)
    with pytest.raises(TypeError, match="launching unmasked_kernel: missing a required argument: 'BLOCK'"):
        unmasked_kernel[(1,)](x, x)
    with pytest.raises(TypeError, match="argument 'out_ptr': a list cannot be passed to a kernel"):
        unmasked_kernel[(1,)](x, [1.0], BLOCK=4)
    with pytest.raises(TypeError, match=r"launched with leaky_relu\[grid\]"):
        K.leaky_relu(x)
    with pytest.raises(ValueError, match="one to three dimensions"):
        unmasked_kernel[(1, 1, 1, 1)](x, x, BLOCK=4)


def test_compiled_launch_without_the_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("BABYTRITON_INTERPRET")
    monkeypatch.setitem(sys.modules, "babytriton.triton.compiler", None)  # as before the compiler existed
    monkeypatch.delattr(triton, "compiler", raising=False)
    for attribute in ("cache", "launchers"):   # nothing left by an earlier compiled run
        monkeypatch.setattr(K.add_kernel, attribute, {})
    x = torch.zeros(8)
    with pytest.raises(RuntimeError, match="BABYTRITON_INTERPRET=1"):
        K.add(x, x, BLOCK_SIZE=8)


@pytest.mark.gpu
def test_cuda_tensors_are_interpreted_on_the_cpu_and_copied_back():
    x, y = torch.randn(300, device="cuda"), torch.randn(300, device="cuda")
    out = K.add(x, y, BLOCK_SIZE=128)
    assert out.device.type == "cuda" and torch.equal(out, x + y)


@triton.jit
def block_ops_kernel(x_ptr, out_ptr, stats_ptr, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)
    cols = tl.multiple_of(tl.max_contiguous(tl.arange(0, C), C), C)
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :])
    acc = tl.zeros([R, C], dtype=tl.float32)
    for i in tl.static_range(3):
        acc = tl.fma(acc, 0.5, tl.sigmoid(x) * i)
    y = tl.clamp(acc + tl.reshape(tl.trans(x), (R, C)), -1.0, 1.0)
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], y)
    col_sum = x.sum(axis=0, keep_dims=True)
    tl.store(stats_ptr + cols[None, :], tl.broadcast_to(col_sum, (1, C)))
    tl.store(stats_ptr + C + tl.arange(0, 1), tl.expand_dims(tl.argmin(tl.min(x, axis=1), axis=0), 0).to(tl.float32))
    tl.store(stats_ptr + C + 1, tl.minimum(tl.maximum(tl.cdiv(tl.program_id(0) + 7, 2), 1), 3).to(tl.float32))


def test_block_operations_equal_torch():
    x = torch.randn(8, 8)
    out, stats = torch.empty(8, 8), torch.empty(10)
    block_ops_kernel[(1,)](x, out, stats, R=8, C=8)
    acc = torch.zeros(8, 8)
    for i in range(3):
        acc = acc * 0.5 + torch.sigmoid(x) * i
    torch.testing.assert_close(out, torch.clamp(acc + x.T.reshape(8, 8), -1.0, 1.0))
    torch.testing.assert_close(stats[:8], x.sum(dim=0))
    assert stats[8] == x.min(dim=1).values.argmin() and stats[9] == 3


@triton.jit
def binary_kernel(a_ptr, b_ptr, out_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    if OP == "+":
        out = a + b
    elif OP == "-":
        out = a - b
    elif OP == "*":
        out = a * b
    elif OP == "/":
        out = a / b
    elif OP == "//":
        out = a // b
    elif OP == "%":
        out = a % b
    elif OP == "<":
        out = a < b
    else:
        out = tl.maximum(a, b)
    tl.store(out_ptr + offs, out)


_TORCH_OPS = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div, "<": torch.lt,
              "//": lambda x, y: torch.div(x, y, rounding_mode="trunc"), "%": torch.fmod, "max": torch.fmax}
_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16, torch.bfloat16,
           torch.float32, torch.float64]


@settings(max_examples=60, deadline=None)
@given(a_dtype=st.sampled_from(_DTYPES), b_dtype=st.sampled_from(_DTYPES), op=st.sampled_from(list(_TORCH_OPS)),
       seed=st.integers(0, 2 ** 16))
def test_binary_operators_follow_the_rules_and_torch(a_dtype, b_dtype, op, seed):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(16, generator=gen) * 20).to(a_dtype)
    b = (torch.randn(16, generator=gen) * 20).to(b_dtype)
    b = torch.where(b == 0, torch.ones_like(b), b)
    try:
        rule = semantics.binary(op if op != "max" else "maximum", tl.from_torch(a_dtype), tl.from_torch(b_dtype))
    except Diagnostic as refused:
        with pytest.raises(CompilationError, match=re.escape(str(refused))):
            binary_kernel[(1,)](a, b, torch.empty(16), OP=op, BLOCK=16)
        return
    out = torch.empty(16, dtype=rule.result.torch)
    binary_kernel[(1,)](a, b, out, OP=op, BLOCK=16)
    want = _TORCH_OPS[op](a.to(rule.operand.torch), b.to(rule.operand.torch)).to(rule.result.torch)
    torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)
