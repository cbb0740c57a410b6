"""InnerReduction (babytriton/schedules/inner_reduction.py): a GPU kernel that reduces rows along their
innermost axis gets a schedule made for its iteration space, whatever the width (narrow rows several to
a block, ragged and symbolic widths with a predicated tail, long rows looped), the number of inputs and
outputs and the dtype. Here: the rule that takes each kernel and the CUDA it makes for sm_90, compiled
by nvcc (no GPU needed); kernels with several reductions and results written in TVMScript; the same
programs against torch on the CPU; and, marked gpu, against torch on a GPU."""
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.s_tir import dlight as dl
from tvm import te
from tvm.script import tirx as T

import babytriton as bt
from babytriton.operators import legalize
from babytriton import schedules
from babytriton.schedules.inner_reduction import KEPT_ROW, InnerReduction

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")
ROW_RULES = {"InnerReduction", "RowKernel", "RowReduction", "SplitReduction"}  # schedules made for rows
REDUCING = {"sum", "max", "min", "argmax", "argmin", "mean", "nn.softmax", "nn.log_softmax"}  # ops of k.fusion


# -- user programs over rows ------------------------------------------------------------------------

def row_sum(x):
    return x.sum(-1)


def row_amax(x):
    return x.amax(dim=-1)


def softmax(x):
    return torch.softmax(x, dim=-1)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def row_dot(x, y):
    return (x * y).sum(-1)


def max_argmax(x):
    values, indices = x.max(dim=-1)
    return values, indices


def router(x):
    probs = torch.softmax(x, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)


def sum_sumsq(x):
    return x.sum(-1), (x * x).sum(-1)


def masked_log_softmax(x, m):
    return F.log_softmax(x.masked_fill(m, -1e4), dim=-1)


SECOND = {rmsnorm: "w", row_dot: "x", masked_log_softmax: "m"}  # the second argument's kind
PROGRAMS = [row_sum, row_amax, softmax, rmsnorm, row_dot, max_argmax, router, sum_sumsq, masked_log_softmax]


def inputs(fn, rows, width, dtype, device="meta"):
    """x of rows x width, and the program's second argument: a vector of the width, a second x, a mask."""
    x = torch.randn(rows, width, device=device).to(dtype)
    second = SECOND.get(fn)
    if second is None:
        return (x,)
    if second == "w":
        return x, torch.rand(width, device=device).to(dtype) + 0.5
    if second == "m":
        return x, torch.rand(rows, width, device=device) < 0.2
    return x, torch.randn(rows, width, device=device).to(dtype)


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def only(k, rule: str = "InnerReduction"):
    """The one kernel of a compiled program that `rule` scheduled."""
    (kernel,) = [kernel for kernel in k.fusion if kernel.rule == rule]
    return kernel


def body(source: str, name: str) -> str:
    start = source.index(" {\n", source.rindex(f" {name}("))
    return source[start:source.index("\n}\n", start)]


# -- which rule takes each kernel (sm_90, meta tensors) ---------------------------------------------

@settings(max_examples=3, deadline=None)
@given(fn=st.sampled_from(PROGRAMS), rows=st.sampled_from([3, 64, 4096]),
       width=st.one_of(st.integers(2, 80), st.sampled_from([100, 1000, 4097, 50257])),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_every_row_kernel_gets_a_row_schedule(fn, rows, width, dtype):
    """Any program over rows, at any width, rows and dtype: each kernel that reduces them is scheduled
    by a rule made for rows (never Dlight's Fallback, Reduction or GeneralReduction; a cast of a few
    elements may stay on Fallback: too small for a launch to pay), and nvcc takes the CUDA."""
    k = bt.jit(target=SM90)(fn).compile(*inputs(fn, rows, width, dtype))
    rules = {kernel.rule for kernel in k.fusion if any(op.op in REDUCING for op in kernel.ops)}
    assert rules and rules <= ROW_RULES, str(k.fusion)
    if NVCC:
        assert b".entry" in nvcc_ptx(k.source)


def test_narrow_rows_share_a_block():
    """64 experts of float32 over 32768 tokens (an MoE router's softmax): 4 threads per row of 16
    float4, 32 rows to a block of 128 threads, reduced by 2 shuffles inside a warp."""
    k = bt.jit(target=SM90)(softmax).compile(torch.empty(32768, 64, device="meta"))
    kernel = only(k)
    assert kernel.launch == "grid 1024 x block (4, 32)", str(k.fusion)
    text = body(k.source, kernel.cuda_kernels[0])
    assert re.search(r"= \*\(float4\*\)\(x_ptr \+", text) and "__syncthreads" not in text, text
    assert set(re.findall(r"__shfl_down_sync\(\w+\[0\], \w+\[0\], (\d+), 32\)", text)) == {"2", "1"}, text


@pytest.mark.parametrize("width, dtype", [(139, torch.float16), (1000, torch.float32), (250, torch.float32)])
def test_rows_a_warp_covers_stay_in_one_warp(width, dtype):
    """Rows that one warp covers with at most 8 vectors a thread take 32 threads, not 64: shuffles only,
    no shared memory or barrier between two warps (H200: p24's rows of 139 halves 79 -> 62 us)."""
    k = bt.jit(target=SM90, cache=False)(softmax).compile(torch.empty(20000, width, device="meta", dtype=dtype))
    kernel = only(k)
    assert kernel.launch == "grid 5000 x block (32, 4)", str(k.fusion)
    assert "__syncthreads" not in body(k.source, kernel.cuda_kernels[0])


def costly_prologue(x):  # a prologue of math calls that four passes read: a stat, max, sum, output
    h = torch.sin(torch.erf(x))
    r = h.abs().mean(-1)
    e = torch.exp(h - h.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True), r


@pytest.mark.parametrize("width, once", [(64, True), (100, True), (KEPT_ROW, True), (KEPT_ROW + 44, False)])
def test_a_costly_value_several_passes_read_is_computed_once_over_narrow_rows(width, once):
    """Rows up to KEPT_ROW wide keep erf and sin in the threads' registers, computed in one block, not
    inlined into each pass (p197's prologue was four times over: 337 math calls a thread); wider rows
    recompute them in each pass (`_recomputed`); nvcc takes either."""
    k = bt.jit(target=SM90, cache=False)(costly_prologue).compile(torch.empty(4096, width, device="meta"))
    assert only(k).rule == "InnerReduction"
    scheduled = k.stages["schedule"]
    assert (scheduled.count("T.erf(") == 1 and scheduled.count("T.sin(") == 1) == once, scheduled
    if NVCC:
        assert b".entry" in nvcc_ptx(k.source)


def test_max_and_argmax_of_rows_leave_fallback():
    """`x.max(dim=-1)` (values and indices) over narrow rows: the max was Dlight's Fallback, one thread
    per row reading it serially; now one kernel gives both (max_argmax.py), rows spread over threads."""
    k = bt.jit(target=SM90)(max_argmax).compile(torch.empty(4096, 64, dtype=torch.float16, device="meta"))
    assert [kernel.rule for kernel in k.fusion] == ["InnerReduction"], str(k.fusion)


@pytest.mark.parametrize("dtype, width, vector", [(torch.float32, 1000, "float4"), (torch.float16, 1000, "uint4"),
                                                   (torch.bfloat16, 100, "nv_bfloat164")])
def test_ragged_widths_read_whole_vectors_and_predicate_the_tail(dtype, width, vector):
    """A width that whole vectors tile but threads x vectors don't (1000 floats: 250 float4 over 64
    threads): every load and store is a whole vector, and the vectors past the row's end are
    predicated off (a condition on the vector's index, never on a lane)."""
    k = bt.jit(target=SM90)(rmsnorm).compile(*inputs(rmsnorm, 4096, width, dtype))
    text = body(k.source, only(k).cuda_kernels[0])
    assert re.search(rf"= \*\({vector}\*\)\(x_ptr \+", text) and re.search(rf"\*\({vector}\*\)\(T_\w+_ptr \+", text)
    assert not re.search(r"x_ptr\[", text) and "if (" in text, text  # no scalar read of the row; a predicate


def softmax_any(x: bt.Tensor(("n", "w"), "float16")):
    return torch.softmax(x, dim=-1)


@pytest.mark.parametrize("fn, shape, dtype", [(softmax_any, None, torch.float16),
                                              (softmax, (16, 50257), torch.bfloat16),
                                              (row_amax, (64, 4097), torch.float32)])
def test_odd_and_symbolic_widths_loop_over_the_row(fn, shape, dtype):
    """A symbolic width, or an odd one (50257, 4097: no vector tiles it): each thread loops over its
    elements of the row, one at a time, with the row's end predicated; the loop stays a loop."""
    k = bt.jit(target=SM90)(fn).compile(*([] if shape is None else [torch.empty(shape, dtype=dtype, device="meta")]))
    kernel = only(k)
    text = body(k.source, kernel.cuda_kernels[0])
    assert "for (" in text and text.count("\n") < 400, text
    if shape is None:
        assert kernel.launch == "grid n x block (128, 1)", str(k.fusion)


def log_softmax_by_hand(x):
    m = x.amax(-1, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(-1, keepdim=True))


def test_online_softmax_reduces_max_and_sum_together():
    """Rows of 16384 or more (online.py): a row's (max, sum) pair is one reduction, both values reduced
    together across threads; few rows take 1024 threads each."""
    k = bt.jit(target=SM90)(log_softmax_by_hand).compile(torch.empty(16, 50257, device="meta"))
    kernel = only(k)
    assert kernel.launch == "grid 16 x block (1024, 1)", str(k.fusion)
    text = body(k.source, kernel.cuda_kernels[0])
    assert "red_buf1" in text, text  # the second value of the pair in the same all-reduce
    if NVCC:
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("rows", [64, 1142])
def test_online_pairs_are_inner_reductions_not_row_kernels(rows):
    """A softmax over rows of 32000 (online (sum, max) pairs): InnerReduction, as many threads a row as
    fill the GPU, not RowKernel's 64 (an H200: 70 -> 29 us for 64 rows, 187 -> 165 for 1142)."""
    k = bt.jit(target=SM90)(softmax).compile(torch.empty(rows, 32000, device="meta"))
    assert [kernel.rule for kernel in k.fusion] == ["InnerReduction"], str(k.fusion)


# -- kernels with several reductions and results (TVMScript): one kernel, one pass -----------------

def max_and_argmax_kernel():
    """Max and argmax of 4096 rows of 64 halves: one (index, value) reduction with babytriton's
    NaN-aware argmax reducer (legalize.reducers), copied out to the indices and to the values."""
    x = te.placeholder((4096, 64), "float16", name="x")
    k = te.reduce_axis((0, 64), name="k")
    pair = te.compute((4096,), lambda i: legalize.reducers()["argmax"]((k.var.astype("int64"), x[i, k]), axis=k),
                      name="pair")
    values = te.compute((4096,), lambda i: pair[1][i], name="values")
    indices = te.compute((4096,), lambda i: pair[0][i], name="indices")
    return te.create_prim_func([x, values, indices]).with_attr("tirx.noalias", True)


max_and_argmax = max_and_argmax_kernel()


@T.prim_func(s_tir=True)
def sum_and_squares(x: T.Buffer((T.int64(100), T.int64(1000)), "float32"),
                    total: T.Buffer((T.int64(100),), "float32"), squares: T.Buffer((T.int64(100),), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, k in T.grid(T.int64(100), T.int64(1000)):
        with T.sblock("total"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = total[vi] + x[vi, vk]
    for i, k in T.grid(T.int64(100), T.int64(1000)):
        with T.sblock("squares"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                squares[vi] = T.float32(0)
            squares[vi] = squares[vi] + x[vi, vk] * x[vi, vk]


@T.prim_func(s_tir=True)
def normalised_and_stat(x: T.Buffer((T.int64(64), T.int64(1000)), "float32"),
                        s: T.Buffer((T.int64(64),), "float32"), y: T.Buffer((T.int64(64), T.int64(1000)), "float32"),
                        peak: T.Buffer((T.int64(64),), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, k in T.grid(T.int64(64), T.int64(1000)):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                s[vi] = T.float32(0)
            s[vi] = s[vi] + x[vi, vk]
    for i, j in T.grid(T.int64(64), T.int64(1000)):
        with T.sblock("y"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = x[vi, vj] / s[vi]
    for i, k in T.grid(T.int64(64), T.int64(1000)):
        with T.sblock("peak"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                peak[vi] = T.min_value("float32")
            peak[vi] = T.max(peak[vi], y[vi, vk])


def scheduled(func):
    """The CUDA of `func` under babytriton's GPU rules, and the rule that took it."""
    target = tvm.target.Target(SM90)
    with target:
        mod = dl.ApplyDefaultSchedule(*schedules.gpu_rules("dlight"))(tvm.IRModule({"main": func}))
    rule = str(mod["main"].attrs[schedules.RULE_ATTR])
    source = tvm.compile(mod, target=target).mod.imports[0].inspect_source()
    return rule, source


@pytest.mark.parametrize("func", [max_and_argmax, sum_and_squares, normalised_and_stat],
                         ids=["max_and_argmax", "sum_and_squares", "statistic_then_its_row"])
def test_several_reductions_and_results_in_one_kernel(func):
    """Max and argmax (indices and values) of the same rows, a sum and a sum of squares, a row sum
    that is a result and that the row's division then reads, followed by the max of that result:
    one kernel. Every thread reads the statistic from the all-reduce (shared memory after a barrier,
    or a shuffle), never back from the result's global buffer that one thread stores."""
    rule, source = scheduled(func)
    assert rule == "InnerReduction"
    if func is normalised_and_stat:
        assert re.search(r"/ \(\(volatile float\*\)red_result", source) and not re.search(r"/ s_ptr\[", source), source
    if NVCC:
        assert b".entry" in nvcc_ptx(source)


def test_declines_a_block_reading_another_row():
    """A block reading another block's per-row result at another row (a shift) would read a value
    that other threads hold: InnerReduction says so and leaves the kernel."""
    @T.prim_func(s_tir=True)
    def shifted(x: T.Buffer((T.int64(64), T.int64(128)), "float32"),
                y: T.Buffer((T.int64(63), T.int64(128)), "float32")):
        T.func_attr({"tirx.noalias": True})
        s = T.sblock_alloc_buffer((T.int64(64),), "float32")
        for i, k in T.grid(T.int64(64), T.int64(128)):
            with T.sblock("sum"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    s[vi] = T.float32(0)
                s[vi] = s[vi] + x[vi, vk]
        for i, j in T.grid(T.int64(63), T.int64(128)):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = x[vi, vj] / s[vi + 1]
    from babytriton.schedules.reasons import hearing
    with tvm.target.Target(SM90), hearing() as heard:
        assert InnerReduction().apply(shifted, tvm.target.Target(SM90), False) is None
    assert heard, "declined without a reason"


# -- the same programs against torch on the CPU (CPUReduction there; symbolic sizes, NaN/inf, empty) --

def rows_with_specials(rows, width, dtype, device="cpu"):
    """Random rows, then a NaN, a +inf, a -inf, an all -inf row and a row of large values."""
    x = torch.randn(rows, width, device=device)
    if rows >= 5:
        x[0, width // 3] = float("nan")
        x[1, width - 1] = float("inf")
        x[2, 0] = -float("inf")
        x[3] = -float("inf")
        x[4] = x[4] * 30.0
    return x.to(dtype)


def softmax_stats_any(x: bt.Tensor(("n", "w"), "float32")):
    probs = torch.softmax(x, dim=-1)
    values, indices = x.max(dim=-1)
    return probs, values, indices, x.sum(-1), (x * x).sum(-1)


def reference_stats(x):
    values, indices = x.max(dim=-1)
    return torch.softmax(x, dim=-1), values, indices, x.sum(-1), (x * x).sum(-1)


@pytest.mark.parametrize("rows, width", [(7, 64), (9, 1000), (0, 33), (6, 1)])
def test_cpu_row_statistics_agree_with_torch(rows, width):
    """One compiled version for every size (a symbolic row count and width): softmax, max and argmax,
    sum and sum of squares over rows holding NaN and inf, no rows at all, and rows of one element."""
    got = bt.jit(target="cpu")(softmax_stats_any)(x := rows_with_specials(rows, width, torch.float32))
    for g, w, terms in zip(got, reference_stats(x), (None, None, None, x, x * x)):
        # a sum in another order than torch's (vectors of partial sums) is within its terms' rounding
        spread = 0.0 if terms is None or not terms.numel() else terms.abs().nan_to_num(0, 0, 0).sum(-1).max().item()
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 + 1e-6 * spread, equal_nan=True)


# -- marked gpu: against torch on the GPU ------------------------------------------------------------

GPU_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def close(got, want, dtype, ranked=None):
    """Results as torch's: values to the dtype's tolerance; indices pointing at values of `ranked` as
    large as torch's indices do (two equal maxima may be taken either way)."""
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want, strict=True):
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=GPU_TOL[dtype], atol=GPU_TOL[dtype], equal_nan=True)
        else:
            torch.testing.assert_close(*(ranked.gather(-1, i.unsqueeze(-1)) for i in (g, w)),
                                       rtol=GPU_TOL[dtype], atol=GPU_TOL[dtype], equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("width", [1, 64, 100, KEPT_ROW, KEPT_ROW + 44])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_costly_prologue_agrees_with_torch(width, dtype):
    x = rows_with_specials(4099, width, dtype, "cuda")
    close(bt.jit(target="gpu")(costly_prologue)(x), costly_prologue(x), dtype, x)


SHAPES = [(32768, 64), (4096, 7), (100, 1000), (64, 4097), (8, 50257), (3, 100)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# every program at every shape, each in one dtype (the dtypes taking turns)
GPU_CASES = [(fn, rows, width, DTYPES[(i + j) % 3]) for i, fn in enumerate(PROGRAMS)
             for j, (rows, width) in enumerate(SHAPES)]


@pytest.mark.gpu
@pytest.mark.parametrize("fn, rows, width, dtype", GPU_CASES,
                         ids=[f"{fn.__name__}-{rows}x{width}-{str(dtype)[6:]}" for fn, rows, width, dtype in GPU_CASES])
def test_gpu_row_programs_agree_with_torch(fn, rows, width, dtype):
    args = inputs(fn, rows, width, dtype, "cuda")
    x = rows_with_specials(rows, width, dtype, "cuda")
    args = (x, *args[1:])
    close(bt.jit(target="gpu")(fn)(*args), fn(*args), dtype, torch.softmax(x, dim=-1) if fn is router else x)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, width", [(5, 3000), (300, 64), (0, 64), (8, 1)])
def test_gpu_symbolic_widths_agree_with_torch(rows, width):
    x = rows_with_specials(rows, width, torch.float32, "cuda")
    got = bt.jit(target="gpu")(softmax_stats_any)(x)
    for g, w in zip(got, reference_stats(x)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("func, shapes", [
    (max_and_argmax, [((4096, 64), "float16"), ((4096,), "float16"), ((4096,), "int64")]),
    (sum_and_squares, [((100, 1000), "float32"), ((100,), "float32"), ((100,), "float32")]),
    (normalised_and_stat, [((64, 1000), "float32"), ((64,), "float32"), ((64, 1000), "float32"),
                           ((64,), "float32")])], ids=["max_and_argmax", "sum_and_squares", "statistic_then_its_row"])
def test_gpu_several_reductions_in_one_kernel_agree_with_torch(func, shapes):
    target = tvm.target.Target("cuda")
    with target:
        mod = dl.ApplyDefaultSchedule(*schedules.gpu_rules("dlight"))(tvm.IRModule({"main": func}))
    run = tvm.compile(mod, target=target)
    x = torch.randn(*shapes[0][0], device="cuda").to(getattr(torch, shapes[0][1]))
    outs = [torch.empty(*shape, dtype=getattr(torch, dtype), device="cuda") for shape, dtype in shapes[1:]]
    run["main"](*[tvm.runtime.from_dlpack(t) for t in (x, *outs)])
    torch.cuda.synchronize()
    if func is max_and_argmax:  # the index of a maximum (of the first where two are equal)
        values, indices = x.max(dim=-1)
        want = [values, values]
        outs[1] = x.gather(-1, outs[1][:, None])[:, 0]
    elif func is sum_and_squares:
        want = [x.sum(-1), (x * x).sum(-1)]
    else:
        s = x.sum(-1)
        want = [s, x / s[:, None], (x / s[:, None]).amax(-1)]
    for got, w in zip(outs, want):
        torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-3)
