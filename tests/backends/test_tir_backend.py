"""backend="tir": loop-level Python straight to a TIR PrimFunc (codegen/tir.py, backends/tir.py)."""
import inspect
import math

import numpy as np
import pytest
import torch
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError")


def tir(fn=None, **options):
    return bt.jit(fn, backend="tir", **options) if fn is not None else bt.jit(backend="tir", **options)


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def compile_error(fn, *args, **options) -> bt.CompilationError:
    with pytest.raises(bt.CompilationError) as info:
        tir(fn, **options).compile(*args)
    err = info.value
    text = str(err).replace(err.source_line or "", "")
    for word in INTERNALS:
        assert word not in text, (word, str(err))
    return err


# --------------------------------------------------------------------------------------------------
# numerics against torch
# --------------------------------------------------------------------------------------------------

@tir(target="cpu")
def add(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32"), c: bt.Tensor((2, 3), "float32")):
    for i in range(2):
        for j in range(3):
            c[i, j] = a[i, j] + b[i, j]


def test_add_writes_into_the_output_and_returns_it():
    a, b, c = torch.randn(2, 3), torch.randn(2, 3), torch.zeros(2, 3)
    out = add(a, b, c)
    assert out is c
    torch.testing.assert_close(c, a + b)
    k = add.compile()
    assert list(k.stages) == ["python", "ast", "tir", "schedule", "source"]
    assert "c[i, j] = a[i, j] + b[i, j]" in k.stages["tir"]
    assert "define" in k.source and "add" in k.source
    assert k.outputs == ["c"]


@tir
def rowsum(a: bt.Tensor(("n", "m"), "float64"), out: bt.Tensor(("n",), "float64")):
    for i in range(a.shape[0]):
        acc = 0
        for j in range(a.shape[1]):
            acc += a[i, j]
        out[i] = acc


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 6), st.integers(0, 9))
def test_rowsum_accumulator_with_symbolic_sizes(n, m):
    a = torch.randn(n, m, dtype=torch.float64)
    out = rowsum(a, torch.full((n,), 7.0, dtype=torch.float64))
    torch.testing.assert_close(out, a.sum(1))
    assert rowsum.cache_info()["compilations"] == 1
    # `acc = 0` then `acc += <float64>`: the variable holds float64 (the promotion of all it is assigned)
    assert "acc: T.float64" in rowsum.compile(a, out).stages["tir"]


@tir
def matmul(a: bt.Tensor(("n", "k"), "float32"), b: bt.Tensor(("k", "m"), "float32"),
           c: bt.Tensor(("n", "m"), "float32")):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s = s + a[i, k] * b[k, j]
            c[i, j] = s


@tir
def parallel_matmul(a: bt.Tensor(("n", "k"), "float32"), b: bt.Tensor(("k", "m"), "float32"),
                    c: bt.Tensor(("n", "m"), "float32")):
    for i in bt.parallel(a.shape[0]):
        for j in bt.parallel(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


@pytest.mark.parametrize("fn", [matmul, parallel_matmul])
@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (5, 7, 3), (16, 9, 33)])
def test_naive_matmul(fn, n, k, m):
    a, b = torch.randn(n, k), torch.randn(k, m)
    torch.testing.assert_close(fn(a, b, torch.empty(n, m)), a @ b, atol=1e-5, rtol=1e-5)


def test_parallel_nest_becomes_one_cpu_thread_pool_loop():
    k = parallel_matmul.compile(torch.ones(4, 2), torch.ones(2, 3), torch.ones(4, 3))
    assert k.stages["tir"].count("T.parallel(") == 2
    assert k.stages["schedule"].count("T.parallel(") == 1   # the nest is fused: TVM runs one level
    assert "i_j" in k.stages["schedule"]


@tir
def relu_clamp(x: bt.Tensor(("n",), "float32"), lo: float, hi: float, y: bt.Tensor(("n",), "float32")):
    for i in range(x.shape[0]):
        v = x[i]
        if v < lo:
            v = lo
        elif v > hi:
            v = hi
        y[i] = v if v > 0.0 else 0.0


def test_if_inside_loops_and_scalar_parameters():
    x = torch.randn(50) * 3
    torch.testing.assert_close(relu_clamp(x, -1.0, 2.0, torch.empty(50)), x.clamp(-1.0, 2.0).relu())


@tir
def intrinsics(x: bt.Tensor((64,), "float32"), out: bt.Tensor((8, 64), "float32")):
    for i in range(64):
        v = x[i]
        out[0, i] = math.exp(v)
        out[1, i] = math.sqrt(abs(v))
        out[2, i] = max(v, 0.25, -v)
        out[3, i] = min(v, 0.5)
        out[4, i] = math.tanh(v)
        out[5, i] = torch.sigmoid(v)
        out[6, i] = math.log(v * v + 1.0)
        out[7, i] = v ** 2.0 + math.floor(v)


def test_math_intrinsics():
    x = torch.randn(64)
    out = intrinsics(x, torch.empty(8, 64))
    expected = torch.stack([x.exp(), x.abs().sqrt(), torch.maximum(torch.maximum(x, torch.tensor(0.25)), -x),
                            x.clamp(max=0.5), x.tanh(), x.sigmoid(), (x * x + 1).log(), x ** 2 + x.floor()])
    torch.testing.assert_close(out, expected)


@tir
def shifts(a: bt.Tensor(("n",), "float32"), diff: bt.Tensor(("n",), "float32"), t: bt.Tensor((3, 4), "float32"),
           tt: bt.Tensor((4, 3), "float32")):
    for i in range(a.shape[0] - 1):
        diff[i] = a[i + 1] - a[i]
    diff[-1] = a[0] - a[-1]            # compile-time negative indices count from the end
    for i in range(3):
        for j in range(4):
            tt[j, i] = t[i, j] * 2.0


def test_index_arithmetic():
    a, t = torch.randn(7), torch.randn(3, 4)
    diff, tt = shifts(a, torch.empty(7), t, torch.empty(4, 3))
    torch.testing.assert_close(diff, torch.roll(a, -1) - a)
    torch.testing.assert_close(tt, t.T * 2)


@tir
def wraps(a: bt.Tensor(("n",), "int64"), out: bt.Tensor(("n",), "int64")):
    for i in range(a.shape[0]):
        out[i] = a[i - 1]              # i - 1 == -1 reads the last element, as in Python


def test_runtime_negative_index_wraps_like_python():
    a = torch.arange(5) * 10
    torch.testing.assert_close(wraps(a, torch.empty(5, dtype=torch.int64)), torch.roll(a, 1))


@tir
def ranges(a: bt.Tensor((10,), "float32"), out: bt.Tensor((10,), "float32"), evens: bt.Tensor((5,), "float32")):
    for i in range(9, -1, -1):
        out[9 - i] = a[i]
    for i in range(0, 10, 2):
        evens[i // 2] = a[i]


def test_range_start_stop_step():
    a = torch.randn(10)
    out, evens = ranges(a, torch.empty(10), torch.empty(5))
    torch.testing.assert_close(out, a.flip(0))
    torch.testing.assert_close(evens, a[::2])


@tir
def first_negative(a: bt.Tensor(("n",), "float32"), where: bt.Tensor((1,), "int64"),
                   positives: bt.Tensor((1,), "int64")):
    i = 0
    while i < a.shape[0] and a[i] >= 0.0:      # a[i] is only read while i is in range
        i += 1
    where[0] = i
    count = 0
    for j in range(a.shape[0]):
        if a[j] > 0.0:
            count += 1
    positives[0] = count


def test_while_loop():
    a = torch.tensor([1.0, 2.0, -3.0, 4.0, -1.0])
    where, positives = first_negative(a, torch.empty(1, dtype=torch.int64), torch.empty(1, dtype=torch.int64))
    assert where.item() == 2 and positives.item() == 3
    where, _ = first_negative(torch.ones(3), torch.empty(1, dtype=torch.int64), torch.empty(1, dtype=torch.int64))
    assert where.item() == 3


@tir
def searches(a: bt.Tensor(("n", "m"), "int64"), first: bt.Tensor(("n",), "int64"),
             odd_sum: bt.Tensor(("n",), "int64")):
    for i in range(a.shape[0]):
        first[i] = -1
        for j in range(a.shape[1]):
            if a[i, j] == 0:
                first[i] = j
                break
        total = 0
        j = 0
        while True:
            j += 1
            if j > a.shape[1]:
                break
            if a[i, j - 1] % 2 == 0:
                continue
            total += a[i, j - 1]
        odd_sum[i] = total


def test_break_and_continue():
    a = torch.randint(0, 4, (6, 9))
    first, odd_sum = searches(a, torch.empty(6, dtype=torch.int64), torch.empty(6, dtype=torch.int64))
    expected_first, expected_sum = torch.empty(6, dtype=torch.int64), torch.empty(6, dtype=torch.int64)
    searches.fn(a, expected_first, expected_sum)
    torch.testing.assert_close(first, expected_first)
    torch.testing.assert_close(odd_sum, expected_sum)
    assert "broke" in searches.compile(a, first, odd_sum).stages["tir"]


@tir
def integer_ops(a: bt.Tensor((12,), "int32"), b: bt.Tensor((12,), "int32"), out: bt.Tensor((6, 12), "int32")):
    for i in range(12):
        out[0, i] = a[i] // b[i]
        out[1, i] = a[i] % b[i]
        out[2, i] = (a[i] & b[i]) ^ (a[i] | 3)
        out[3, i] = a[i] << 2
        out[4, i] = -a[i] if not a[i] > 0 else a[i] * 3
        out[5, i] = a[i] ** 3


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=12, max_size=12),
       st.lists(st.integers(-9, 9).filter(bool), min_size=12, max_size=12))
def test_compiled_loops_match_running_them_as_python(a, b):
    # the undecorated function, run eagerly on torch tensors, is the reference
    a, b = torch.tensor(a, dtype=torch.int32), torch.tensor(b, dtype=torch.int32)
    expected = torch.empty(6, 12, dtype=torch.int32)
    integer_ops.fn(a, b, expected)
    torch.testing.assert_close(integer_ops(a, b, torch.empty(6, 12, dtype=torch.int32)), expected)


def test_integer_semantics_follow_python_and_torch():
    a = torch.randint(-20, 20, (12,), dtype=torch.int32)
    b = torch.tensor([3, -3, 5, -5, 7, 2, -2, 1, -1, 4, -4, 6], dtype=torch.int32)
    out = integer_ops(a, b, torch.empty(6, 12, dtype=torch.int32))
    expected = torch.stack([torch.floor_divide(a, b), torch.remainder(a, b), (a & b) ^ (a | 3), a << 2,
                            torch.where(a > 0, a * 3, -a), a ** 3])
    torch.testing.assert_close(out, expected)


@tir
def float_floor_ops(a: bt.Tensor(("n",), "float32"), b: bt.Tensor(("n",), "float32"),
                    out: bt.Tensor((2, "n"), "float32")):
    for i in range(a.shape[0]):
        out[0, i] = a[i] % b[i]
        out[1, i] = a[i] // b[i]


SPECIALS = [-math.inf, -1.5, -0.0, 0.0, 1.5, math.inf, math.nan, 7.0, -7.0, 0.3, -2.5]


def test_float_floor_ops_follow_torch_on_special_values():
    """Scalar `%` and `//` use the same rules as tensors (legalize.floor_mod/floor_divide): -1.5 % inf
    is inf, -1.5 // inf is -1, inf // 2 is NaN, the sign of a zero as torch gives it."""
    v = torch.tensor(SPECIALS)
    a, b = v.repeat_interleave(len(v)), v.repeat(len(v))
    out = float_floor_ops(a, b, torch.empty(2, len(a)))
    for got, want in zip(out, (torch.remainder(a, b), torch.floor_divide(a, b))):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got.signbit() & ~got.isnan(), want.signbit() & ~want.isnan())


@tir
def guarded(a: bt.Tensor(("n",), "float32"), out: bt.Tensor(("n",), "float32")):
    n = a.shape[0]
    for i in range(n):
        # the right side only runs when the left is true: no read past the end
        out[i] = 1.0 if i + 1 < n and a[i + 1] > a[i] else 0.0


def test_and_short_circuits_at_run_time():
    a = torch.randn(9)
    expected = torch.cat([(a[1:] > a[:-1]).float(), torch.zeros(1)])
    torch.testing.assert_close(guarded(a, torch.empty(9)), expected)


@tir
def swap_and_scale(a: bt.Tensor((4,), "float64"), k: bt.constexpr, out: bt.Tensor((4,), "float64")):
    for i in range(4):
        x, y = a[i], a[3 - i]
        x, y = y, x                        # reads both before writing either
        out[i] = x * k + y * 0


def test_tuple_assignment_and_constexpr():
    a = torch.randn(4, dtype=torch.float64)
    torch.testing.assert_close(swap_and_scale(a, 3, torch.empty(4, dtype=torch.float64)), a.flip(0) * 3)


@tir
def two_outputs(a: bt.Tensor(("n",), "float32"), lo: bt.Tensor(("n",), "float32"), hi: bt.Tensor(("n",), "float32")):
    for i in range(a.shape[0]):
        lo[i] = min(a[i], 0.0)
        hi[i] = max(a[i], 0.0)


def test_numpy_and_non_contiguous_outputs_are_written_in_place():
    a = np.random.randn(6).astype("float32")
    lo, hi = np.zeros(6, "float32"), np.zeros(6, "float32")
    r_lo, r_hi = two_outputs(a, lo, hi)
    assert r_lo is lo and r_hi is hi
    np.testing.assert_allclose(lo, np.minimum(a, 0))
    np.testing.assert_allclose(hi, np.maximum(a, 0))
    big = torch.zeros(6, 2)
    two_outputs(torch.from_numpy(a), big[:, 0], big[:, 1])    # strided views: copied back after the call
    t = torch.from_numpy(a)
    torch.testing.assert_close(big, torch.stack([t.clamp(max=0), t.clamp(min=0)], 1))


def test_no_output_returns_none():
    @tir
    def reads_only(a: bt.Tensor((3,), "float32")):
        s = 0.0
        for i in range(3):
            s += a[i]

    assert reads_only(torch.ones(3)) is None


def test_outputs_may_not_share_memory_with_inputs():
    a = torch.randn(6)
    with pytest.raises(ValueError, match="'hi' is written by the function and shares memory with parameter 'a'"):
        two_outputs(a, torch.empty(6), a)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros(6, "float32")
        ro.flags.writeable = False
        two_outputs(np.zeros(6, "float32"), np.zeros(6, "float32"), ro)


@tir
def doubling(x: float, k: bt.constexpr, out: bt.Tensor((2,), "float64")):
    for i in range(3):
        x = x * 2          # parameters changed in a loop get a run-time copy
        k = k + 1
    out[0] = x
    out[1] = k


def test_parameters_reassigned_in_loops():
    torch.testing.assert_close(doubling(1.5, 4, torch.zeros(2, dtype=torch.float64)),
                               torch.tensor([12.0, 7.0], dtype=torch.float64))


def test_locals_keep_python_scoping_for_compile_time_values():
    @tir
    def unrolled_choice(a: bt.Tensor((4,), "float32"), mode: bt.constexpr, out: bt.Tensor((4,), "float32")):
        scale = 2.0
        if mode == "double":                 # decided at compile time: one branch is compiled
            scale = scale * 2
        for i in range(4):
            out[i] = a[i] * scale

    a = torch.randn(4)
    torch.testing.assert_close(unrolled_choice(a, "double", torch.empty(4)), a * 4)
    torch.testing.assert_close(unrolled_choice(a, "single", torch.empty(4)), a * 2)
    assert "scale" not in unrolled_choice.compile(a, "double", torch.empty(4)).stages["tir"]


# --------------------------------------------------------------------------------------------------
# GPU code generation (built here, run on a GPU below)
# --------------------------------------------------------------------------------------------------

@tir(target=CUDA)
def normalise(a: bt.Tensor(("n", "m"), "float32"), out: bt.Tensor(("n", "m"), "float32")):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            total += a[i, j]
    for i in bt.parallel(a.shape[0]):
        for j in bt.parallel(a.shape[1]):
            out[i, j] = a[i, j] / total


def test_gpu_kernels_one_per_parallel_nest():
    k = normalise.compile()
    schedule = k.stages["schedule"]
    assert schedule.count('thread="blockIdx.x"') == 2 and schedule.count('thread="threadIdx.x"') == 2
    assert "T.thread_binding(1, " in schedule                 # the serial sum: a one-thread kernel
    src = k.source
    assert src.count("__global__ void") >= 2 and "blockIdx.x" in src and "threadIdx.x" in src
    assert "total_ptr" in src   # the top-level local is GPU memory shared by both kernels


def test_gpu_add_without_parallel_loops_is_one_thread():
    k = tir(add.fn, target=CUDA).compile()
    assert 'T.thread_binding(1, thread="blockIdx.x")' in k.stages["schedule"]
    assert "__global__" in k.source


# --------------------------------------------------------------------------------------------------
# errors: located at the user's code, no internals
# --------------------------------------------------------------------------------------------------

def out_of_bounds(a: bt.Tensor((2, 3), "float32"), c: bt.Tensor((2, 3), "float32")):
    for i in range(3):
        for j in range(3):
            c[i, j] = a[i, j]  # error


def test_provably_out_of_bounds_index():
    err = compile_error(out_of_bounds)
    assert err.lineno == line_of(out_of_bounds, "# error")
    assert "reaches 2" in err.message and "dimension 0 of 'a' (size 2)" in err.message
    assert err.source_line.index("i", err.col) == err.col    # the caret is under the index


def off_by_one(a: bt.Tensor(("n",), "float32"), c: bt.Tensor((4,), "float32")):
    for i in range(4):
        if i < 3:
            c[i + 1] = a[i]   # fine: i + 1 <= 3 here
    c[4] = 0.0  # error


def test_bounds_use_enclosing_conditions_and_constants():
    err = compile_error(off_by_one)
    assert err.lineno == line_of(off_by_one, "# error") and "index 4 is out of bounds" in err.message


def returns_value(a: bt.Tensor((2,), "float32")):
    return a[0]  # error


def whole_tensor(a: bt.Tensor((2,), "float32"), c: bt.Tensor((2,), "float32")):
    c[0] = a + 1.0  # error


def sliced(a: bt.Tensor((2, 2), "float32"), c: bt.Tensor((2,), "float32")):
    c[0] = a[0, :]  # error


def too_few(a: bt.Tensor((2, 2), "float32"), c: bt.Tensor((2,), "float32")):
    c[0] = a[0]  # error


def rebinds(a: bt.Tensor((2,), "float32"), c: bt.Tensor((2,), "float32")):
    c = a  # error


def loop_var_assigned(c: bt.Tensor((4,), "float32")):
    for i in range(4):
        i = i + 1  # error


def local_after_loop(a: bt.Tensor((4,), "float32"), c: bt.Tensor((1,), "float32")):
    for i in range(4):
        s = a[i]
    c[0] = s  # error


def parallel_in_serial(a: bt.Tensor((4, 4), "float32"), c: bt.Tensor((4, 4), "float32")):
    for i in range(4):
        for j in bt.parallel(4):  # error
            c[i, j] = a[i, j]


def racy_store(a: bt.Tensor(("n",), "float32"), c: bt.Tensor((1,), "float32")):
    for i in bt.parallel(a.shape[0]):
        c[0] = c[0] + a[i]  # error


def racy_local(a: bt.Tensor(("n",), "float32"), c: bt.Tensor((1,), "float32")):
    s = 0.0
    for i in bt.parallel(a.shape[0]):
        s = s + a[i]  # error
    c[0] = s


def breaks(c: bt.Tensor((4,), "float32")):
    for i in bt.parallel(4):
        break  # error


def int_power(a: bt.Tensor((4,), "int32"), c: bt.Tensor((4,), "int32")):
    for i in range(4):
        c[i] = a[i] ** a[i]  # error


def unknown_call(a: bt.Tensor((4,), "float32"), c: bt.Tensor((4,), "float32")):
    for i in range(4):
        c[i] = print(a[i])  # error


def float_index(a: bt.Tensor((4,), "float32"), c: bt.Tensor((4,), "float32")):
    for i in range(4):
        c[i] = a[i * 0.5]  # error


def uses_lambda(c: bt.Tensor((4,), "float32")):
    f = lambda v: v  # error  # noqa: E731


@pytest.mark.parametrize("fn,words", [
    (returns_value, "writes its results into its parameters"),
    (whole_tensor, "whole tensor"),
    (sliced, "slices are not supported"),
    (too_few, "index each of them"),
    (rebinds, "tensor parameter"),
    (loop_var_assigned, "loop variable 'i'"),
    (local_after_loop, "'s' only exists inside the loop on line"),
    (parallel_in_serial, "top of the function body"),
    (racy_store, "race"),
    (racy_local, "every iteration at once"),
    (breaks, "`break` cannot leave a bt.parallel loop"),
    (int_power, "compile-time exponent"),
    (unknown_call, "cannot call `print`"),
    (float_index, "an index must be an integer"),
    (uses_lambda, "lambda expressions are not supported"),
])
def test_errors_point_at_the_line(fn, words):
    err = compile_error(fn)
    assert err.lineno == line_of(fn, "# error"), str(err)
    assert words in err.message, err.message


def test_parallel_is_range_outside_jit():
    assert list(bt.parallel(3)) == [0, 1, 2] and list(bt.parallel(1, 7, 3)) == [1, 4]


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown backend 'tvm'"):
        bt.jit(backend="tvm")


# --------------------------------------------------------------------------------------------------
# on a GPU
# --------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_runs_match_torch():
    gpu_add = tir(add.fn, target="gpu")
    a, b = torch.randn(2, 3, device="cuda"), torch.randn(2, 3, device="cuda")
    torch.testing.assert_close(gpu_add(a, b, torch.empty(2, 3, device="cuda")), a + b)
    gpu_mm = tir(parallel_matmul.fn, target="gpu")
    x, y = torch.randn(70, 33, device="cuda"), torch.randn(33, 45, device="cuda")
    torch.testing.assert_close(gpu_mm(x, y, torch.empty(70, 45, device="cuda")), x @ y, atol=1e-4, rtol=1e-4)
    gpu_norm = tir(normalise.fn, target="gpu")
    z = torch.rand(300, 7, device="cuda")
    torch.testing.assert_close(gpu_norm(z, torch.empty_like(z)), z / z.sum(), rtol=1e-4, atol=1e-6)
    gpu_rowsum = tir(rowsum.fn, target="gpu")
    w = torch.randn(9, 13, dtype=torch.float64, device="cuda")
    torch.testing.assert_close(gpu_rowsum(w, torch.empty(9, dtype=torch.float64, device="cuda")), w.sum(1))


@tir(target="cpu")
def negated_compare(a: bt.Tensor((6,), "float32"), b: bt.Tensor((6,), "float32"), out: bt.Tensor((6,), "float32")):
    for i in range(6):
        if not (a[i] >= b[i]):
            out[i] = 1.0
        else:
            out[i] = 0.0


def test_not_of_a_comparison_is_true_for_nan():
    """TVM's simplifier rewrites !(a >= b) as a < b, which NaN makes false; torch's ~(a >= b) is True."""
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, 1.0, 2.0, nan, -inf, 0.0])
    b = torch.tensor([1.0, nan, 1.0, nan, inf, -0.0])
    out = negated_compare(a, b, torch.empty(6))
    torch.testing.assert_close(out, (~(a >= b)).float())


def shift_past_half(x: bt.Tensor((4,), "float16"), out: bt.Tensor((4,), "float16")):
    for i in range(4):
        out[i] = x[i] + 70000


def test_numbers_beyond_float16_are_inf():
    """A number past float16's range is inf in loop code too, as torch converts it (TVM refused the
    float16 literal 70000)."""
    x = torch.tensor([1.0, -2.0, 0.0, float("nan")], dtype=torch.float16)
    out = tir(shift_past_half)(x, torch.empty(4, dtype=torch.float16))
    torch.testing.assert_close(out, x + 70000, equal_nan=True, rtol=0, atol=0)


def divide_by_folded_zero(x: bt.Tensor((6,), "float32"), a: bt.Tensor((6,), "float32"),
                          b: bt.Tensor((6,), "float32"), c: bt.Tensor((6,), "float32")):
    for i in range(6):
        a[i] = x[i] / (x[i] - x[i])
        b[i] = 0.0 / (x[i] - x[i])
        c[i] = x[i] / 0.0


def test_division_by_a_divisor_that_folds_to_zero():
    """Float `/` by a divisor TVM's simplifier folds to 0 (or by the number 0.0) gives IEEE's inf and
    NaN as torch does; it was a raw "Divide by zero" error, and `x - x` was 0 for inf."""
    x = torch.tensor([1.0, -2.0, 0.0, -0.0, float("inf"), float("nan")])
    outs = [torch.empty(6) for _ in range(3)]
    tir(divide_by_folded_zero)(x, *outs)
    for got, want in zip(outs, (x / (x - x), 0.0 / (x - x), x / 0.0)):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
