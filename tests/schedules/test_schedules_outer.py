"""Reductions over outer or middle axes: OuterReduction (GPU) and CPUOuterReduction (CPU), compared
with torch on generated shapes, axis sets and dtypes, NaN/inf, empty axes, symbolic sizes and
non-contiguous inputs; their CUDA generated for sm_90 and compiled by nvcc; on a GPU, compared there."""
import hashlib
import math
import re
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.testing.fuzz.checking import load
from babytriton import schedules
from babytriton.schedules.analysis import find_all

SM90 = {"kind": "cuda", "arch": "sm_90"}
OUTER_RULES = ("OuterReduction", "CPUOuterReduction")
# reductions of at most 8 elements over outer axes are SmallReduction's (a thread an element)
GPU_OUTER = {"OuterReduction", "SmallReduction"}
HALF = (torch.float16, torch.bfloat16)
REDUCTIONS = ("sum", "mean", "max", "min", "variance")


# -- programs: each reduction as a user writes it, in a module of its own (babytriton reads source) --
FORMS = {
    "sum": "x.sum({axes})",
    "mean": "x.float().mean({axes})",
    "amax": "x.amax({axes})",
    "amin": "x.amin(dim={axes})",
    "center": "x - x.float().mean({axes}, keepdim=True)",
    "normalise": "(x - x.mean({axes}, keepdim=True)) / torch.sqrt(x.var({axes}, keepdim=True, unbiased=False) + 1e-5)",
    "stats": "x.float().mean({axes}), x.float().var({axes}, unbiased=False)",
}
_programs = {}


def program(form: str, axes: tuple, tmp_dir):
    """`def f(x): return <form over axes>`, written to a file and imported (memoised by its text)."""
    return module(f"import torch\n\n\ndef f(x):\n    return {FORMS[form].format(axes=axes)}\n", tmp_dir).f


def module(text: str, tmp_dir):
    """A module of source `text`, written to a file and imported (memoised by its text)."""
    if text not in _programs:
        path = tmp_dir / f"outer_{hashlib.sha1(text.encode()).hexdigest()[:12]}.py"
        path.write_text(text)
        _programs[text] = load(path)
    return _programs[text]


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("outer_programs")


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    return torch.randn(shape, generator=g).to(dtype)


def check(got, want, dtype, count=1):
    """Results against torch's: half sums round once per element at most, and each reduced element
    adds its rounding (`count` of them)."""
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        tol = 2e-2 if dtype in HALF or w.dtype in HALF else 1e-4
        torch.testing.assert_close(g, w, rtol=tol, atol=tol * max(1.0, count ** 0.5), equal_nan=True)


def rules(kernel) -> list:
    return [k.rule for k in kernel.fusion if k.rule]


# -- generated: rank 2-4, axis sets that keep the innermost axis (and some that don't) ----------
WIDTHS = (1, 2, 3, 4, 5, 8, 12, 16, 33, 64, 100)


@st.composite
def reductions(draw):
    rank = draw(st.integers(2, 4))
    shape = [draw(st.integers(1, 7)) for _ in range(rank - 1)] + [draw(st.sampled_from(WIDTHS))]
    keep_inner = draw(st.booleans()) or draw(st.booleans())
    axes = draw(st.lists(st.integers(0, rank - 2), min_size=1, max_size=rank - 1, unique=True))
    if not keep_inner and len(axes) < rank - 1:
        axes = axes + [rank - 1]  # a mixed set: (0, 2) of (A, B, C), whose innermost is reduced
    reduced = 1
    for a in axes:
        shape[a] = draw(st.sampled_from((1, 2, 3, 17, 64, 130)))
        reduced *= shape[a]
    dtype = draw(st.sampled_from((torch.float32, torch.float32, torch.float16, torch.bfloat16, torch.int8)))
    forms = ("sum", "amax") if dtype == torch.int8 else tuple(FORMS)
    return draw(st.sampled_from(forms)), tuple(sorted(axes)), tuple(shape), dtype, reduced


@settings(max_examples=12, deadline=None)
@given(reductions())
def test_cpu_outer_reductions_match_torch(tmp_dir, case):
    form, axes, shape, dtype, reduced = case
    f = program(form, axes, tmp_dir)
    x = make(shape, dtype)
    check(bt.jit(target="cpu")(f)(x), f(x), dtype, reduced)


@settings(max_examples=8, deadline=None)
@given(reductions())
def test_gpu_outer_reductions_build_and_take_the_rule(tmp_dir, case):
    """For sm_90: a reduction that keeps the innermost axis is OuterReduction's, none on Fallback."""
    form, axes, shape, dtype, _ = case
    x = make(shape, dtype)
    k = bt.jit(target=SM90)(program(form, axes, tmp_dir)).compile(x)
    if len(shape) - 1 not in axes and any(shape[a] > 1 for a in axes) and shape[-1] > 1:
        reducing = [kk for kk in k.fusion if any(op.op in REDUCTIONS for op in kk.ops)]
        # Fallback is left for kernels too small for a launch to pay (fewer elements than one block)
        small = x.numel() < 512
        assert set(rules(k)) & GPU_OUTER and (small or not any(kk.rule == "dlight.gpu.Fallback" for kk in reducing)), \
            k.fusion


# -- the rules' cases, chosen: each shape exercises one branch of the plan ---------------------
CASES = [  # (form, axes, shape, dtype): the rule's choice on a GPU, on a CPU
    ("sum", (0,), (2048, 1024), torch.float32),        # vectors of 4, cross-thread, parts; CPU chunks
    ("sum", (0,), (4099, 3), torch.float32),           # 3 columns: one row per warp row
    ("sum", (0,), (300, 4099), torch.float32),         # a prime width: predicated, partials per thread
    ("mean", (1,), (4, 513, 96), torch.float32),       # a middle axis, ragged rows (parts don't divide)
    ("amax", (1,), (3, 1000, 40), torch.float32),      # NaN-aware max; CPU: few outer rows, chunks
    ("amax", (1,), (64, 100, 96), torch.bfloat16),
    ("amin", (0,), (3000, 64), torch.int8),
    ("sum", (0, 2), (5, 6, 300, 8), torch.float32),    # several reduced axes, kept (6, 8)
    ("sum", (0, 1), (32, 40, 2, 16), torch.float16),   # kept (2, 16), half: float32 accumulators
    ("mean", (0,), (1000, 64), torch.bfloat16),
    ("sum", (0,), (3000, 64), torch.int8),             # int8 summed in int64
    ("center", (0,), (700, 128), torch.float32),       # an epilogue over the whole input
    ("normalise", (0,), (640, 96), torch.float32),     # batch norm's statistics and normalisation
    ("stats", (0, 1), (16, 50, 24), torch.float32),    # two results
]


@pytest.mark.parametrize("form, axes, shape, dtype", CASES, ids=lambda v: str(v).replace(" ", ""))
def test_cpu_cases_match_torch(tmp_dir, form, axes, shape, dtype):
    f = program(form, axes, tmp_dir)
    x = make(shape, dtype)
    k = bt.jit(target="cpu")(f)
    assert "CPUOuterReduction" in rules(k.compile(x)), k.compile(x).fusion
    check(k(x), f(x), dtype, max(shape))


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def zoo(a: bt.Tensor((2048, 1024), "float32"), b: bt.Tensor((300, 4099), "float32"),
        c: bt.Tensor((3, 1000, 40), "float32"), d: bt.Tensor((32, 40, 2, 16), "float16"),
        e: bt.Tensor((3000, 64), "int8"), f: bt.Tensor((1000, 64), "bfloat16"),
        g: bt.Tensor(("n", "m"), "float32"), h: bt.Tensor((64, "s", 96), "float32"),
        i: bt.Tensor((8, 128, 32, 64), "float32"), j: bt.Tensor((64, 100, 96), "bfloat16")):
    """One kernel of each kind in one module: one nvcc run compiles them all."""
    return (a.sum(0), b.sum(0), c.amax(1), d.sum((0, 1)), e.sum(0), f.float().mean(0),
            g - g.mean(0), h.mean(1), a.mean(0, keepdim=True) * a.var(0, keepdim=True), i.sum((0, 1)),
            d.amax(0), j.amax(1), e.amin(0), (j > 0).sum(1))


def test_gpu_cuda_of_every_kind_compiles_with_nvcc():
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)  # no kernel left in one block
        k = bt.jit(target=SM90)(zoo).compile()
    # 15 reductions in 12 kernels: a's sum, mean and variance's mean, e's sum and amin, j's amax and count
    # each read their input in one kernel (FuseMultiOutput)
    assert rules(k).count("OuterReduction") == 12 and set(rules(k)) == {"OuterReduction", "Elementwise"}, k.fusion
    assert "float4" in k.source  # whole vectors of columns where they tile the rows
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


# -- memory speed: loads in flight (threads, rows staged in registers) and 16-byte loads -----------
def launches(k) -> list:
    """The thread-bound extents of each launch of `k`'s kernels, as {tag: extent} per loop nest."""
    out = []
    for _, func in tvm.script.from_source(k.stages["schedule"]).functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            for loop in find_all(func.body, tvm.tirx.For):
                if loop.kind == tvm.tirx.ForKind.THREAD_BINDING and loop.thread_binding.thread_tag == "blockIdx.y":
                    inner = [m for m in find_all(loop, tvm.tirx.For) if m.kind == tvm.tirx.ForKind.THREAD_BINDING]
                    out.append({m.thread_binding.thread_tag: int(m.extent) for m in inner})
    return out


def column_norm(x):
    return x / x.norm(dim=0, keepdim=True).clamp_min(1e-6)


def column_argmax(x):
    return x.max(dim=0)


def test_gpu_column_reductions_load_at_memory_speed():
    """p105's (56306, 512) float32 norm over the outer axis: its first stage has 2^18 threads (an
    H200 holds 132 x 2048; at 2^16 each thread's one 16-byte load in flight read at ~1 TB/s) and
    each loads 4 consecutive rows (a float[16] in registers) before it sums any; p46's (967, 32000)
    float16 argmax loads 8 halves at once (uint4; it loaded a half at a time) into a half[32]."""
    k = bt.jit(target=SM90)(column_norm).compile(torch.empty(56306, 512, device="meta"))
    assert rules(k) == ["OuterReduction"], k.fusion
    [first] = launches(k)
    assert math.prod(first.values()) >= 1 << 18, first
    assert "float x_local_ptr[16];" in k.source, k.source[:2000]
    pairs = bt.jit(target=SM90)(column_argmax).compile(torch.empty(967, 32000, dtype=torch.float16, device="meta"))
    assert rules(pairs) == ["OuterReduction"], pairs.fusion
    assert "half x_local_ptr[32];" in pairs.source and "*(uint4*)(x_ptr" in pairs.source
    assert not re.search(r"\bx_ptr\[", pairs.source), "a half loaded alone"
    if shutil.which("nvcc"):
        for source in (k.source, pairs.source):
            ptx = nvcc_ptx(source).decode()
            first_kernel = ptx[ptx.index(".entry"):]
            first_kernel = first_kernel[:first_kernel.index("\n}\n")]
            loads = [m.start() for m in re.finditer(r"ld\.global\.nc\.v4", first_kernel)]
            math_ops = [m.start() for m in re.finditer(r"\b(fma|setp\.\w+\.f32|setp\.\w+\.f16)", first_kernel)]
            assert len(loads) >= 4 and loads[3] < min(op for op in math_ops if op > loads[0]), "loads not grouped"


def column_first_argmax(x):
    return x.argmax(0)


def column_float_mean(x):
    return x.float().mean(0)


@pytest.mark.parametrize("form, shape, dtype", [
    ("sum", (3000, 4100), torch.float32), ("argmax", (967, 3200), torch.float16), ("argmax", (1001, 1000), torch.float32),
    ("amax", (2000, 4099), torch.float32), ("mean", (3001, 2056), torch.float16), ("sum", (45, 1000), torch.float16)],
    ids=lambda v: str(v).replace(" ", ""))
def test_staged_schedules_run_serially_match_torch(form, shape, dtype):
    """The sm_90 schedule itself (rows grouped, staged through registers, predicated where ragged,
    parts folded) run on the CPU with its thread loops serial (its cross-thread steps are then plain
    loops), against torch: NaN, inf, ties of float16 argmax (the first index)."""
    from test_schedules_small import _run_on_cpu
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))) * 3).to(dtype)
    x[5, 3], x[7, 9], x[shape[0] - 1, 9], x[3, 11] = float("nan"), float("inf"), float("inf"), float("-inf")
    f = {"sum": column_sum, "argmax": column_first_argmax, "amax": column_max, "mean": column_float_mean}[form]
    k = bt.jit(target=SM90, cache=False)(f).compile(x.to("meta"))
    assert rules(k) == ["OuterReduction"], k.fusion
    assert "x_local_ptr[" in k.source  # the loads staged through registers
    want = f(x)
    got = _run_on_cpu(k, (x,), want).to(want.dtype)
    if form == "argmax":
        assert torch.equal(got, want)
    else:
        check(got, want, dtype, shape[0])


# -- edges: NaN and inf, empty axes, symbolic sizes, non-contiguous inputs -------------------------
def column_max(x):
    return x.amax(0)


def column_sum(x):
    return x.sum(0)


def column_mean(x):
    return x.mean(0)


def with_nan_and_inf(x):
    """NaN in columns 1 and 2, inf in 3 and 5, -inf in 4 and 5 (inf - inf: NaN in a sum)."""
    for row, col, value in [(3, 1, "nan"), (150, 2, "nan"), (7, 3, "inf"), (8, 4, "-inf"), (9, 5, "inf"),
                            (10, 5, "-inf")]:
        x[row, col] = float(value)
    return x


def test_nan_and_inf_propagate_as_in_torch(cpu_target):
    x = with_nan_and_inf(torch.randn(200, 40, generator=torch.Generator().manual_seed(0)))
    for f in (column_max, column_sum, column_mean):  # sums of 200: another order, an ulp of ~14 apart
        torch.testing.assert_close(bt.jit(target=cpu_target)(f)(x), f(x), equal_nan=True, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0, 0)])
def test_empty_axes_give_torch_results(shape):
    x = torch.randn(shape)
    for f in (column_sum, column_mean):
        torch.testing.assert_close(bt.jit(target="cpu")(f)(x), f(x), equal_nan=True)


def symbolic_columns(x: bt.Tensor(("n", "m"), "float32")):
    return x.sum(0), x.amax(0)


def symbolic_pool(x: bt.Tensor(("b", "s", "h"), "float32")):
    return x.mean(1)


def test_symbolic_sizes():
    """(On sm_90 `zoo` has them.)"""
    for f in (symbolic_columns, symbolic_pool):
        k = bt.jit(target="cpu")(f)
        with warnings.catch_warnings():
            warnings.simplefilter("error", schedules.SerialKernelWarning)
            assert set(rules(k.compile())) == {"CPUOuterReduction"}, k.compile().fusion
        empty = [(2, 0, 7), (0, 5, 7), (2, 5, 0)] if f is symbolic_pool else []  # (an empty max is an error)
        for shape in [(1, 1, 1), (3, 700, 5), (2, 33, 64), (5, 1, 4096), *empty]:
            x = torch.randn(shape[1:] if f is symbolic_columns else shape)
            check(k(x), f(x), torch.float32, shape[1])


def test_non_contiguous_inputs():
    base = torch.randn(96, 300, generator=torch.Generator().manual_seed(0))
    for f in (column_sum, column_max):
        # a sum of 300 in another order: within its rounding (an unseeded draw was 1.2e-5 apart)
        torch.testing.assert_close(bt.jit(target="cpu")(f)(base.t()), f(base.t()), rtol=1e-5, atol=1e-4)
    sliced = torch.randn(400, 130)[::2, 1:97]
    torch.testing.assert_close(bt.jit(target="cpu")(column_mean)(sliced), column_mean(sliced))


# -- on a GPU: the same against torch there ------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("form, axes, shape, dtype", CASES + [
    ("sum", (0,), (8192, 4096), torch.float32), ("amax", (1,), (32, 2048, 1024), torch.float32),
    ("mean", (1,), (4, 8192, 1000), torch.float16), ("sum", (0,), (1 << 20, 4), torch.float32),
    ("sum", (0,), (56306, 512), torch.float32), ("amax", (0,), (967, 32000), torch.float16),
    ("mean", (1,), (3, 4097, 1000), torch.bfloat16), ("sum", (0,), (4099, 24), torch.float16)],
    ids=lambda v: str(v).replace(" ", ""))
def test_gpu_cases_match_torch(tmp_dir, form, axes, shape, dtype):
    f = program(form, axes, tmp_dir)
    x = make(shape, dtype).cuda()
    k = bt.jit(target="gpu")(f)
    assert "OuterReduction" in rules(k.compile(x)), k.compile(x).fusion
    check(k(x), f(x), dtype, max(shape))


@pytest.mark.gpu
def test_gpu_edges_match_torch():
    x = with_nan_and_inf(torch.randn(300, 40, device="cuda"))
    for f in (column_max, column_sum, column_mean):
        torch.testing.assert_close(bt.jit(target="gpu")(f)(x), f(x), equal_nan=True)
        torch.testing.assert_close(bt.jit(target="gpu")(f)(x.t().contiguous().t()), f(x), equal_nan=True)
    k = bt.jit(target="gpu")(symbolic_columns)
    for shape in [(1, 1), (700, 5), (33, 4099), (5000, 64)]:
        y = torch.randn(shape, device="cuda")
        check(k(y), symbolic_columns(y), torch.float32, shape[0])
    empty = torch.randn(0, 5, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(column_sum)(empty), column_sum(empty))


# -- generated prologues: inputs broadcast along reduced or kept axes, math before the reduction, ---
# -- and argmax/argmin pairs (`x.max(dim)`: values and indices from one reduction) -----------------
UNARY = ("F.silu(x)", "torch.sin(x)", "x.abs()", "torch.exp(-x * x)", "torch.sigmoid(x)", "torch.tanh(x)")
WITH_Y = ("h / (1.0 + y * y)", "h * y + y.abs()", "torch.maximum(h, y)", "h - y")
REDUCE = {"amax": "h.amax({axes})", "sum": "h.sum({axes})", "mean": "h.float().mean({axes})",
          "argmax": "h.argmax({axis})", "argmin": "h.argmin({axis})", "max": "h.max(dim={axis})",
          "min": "h.min(dim={axis}, keepdim=True)"}
PAIRS = ("argmax", "argmin", "max", "min")
PAIR_OPS = ("argmax", "argmin", "max", "min")
MOST = 200_000  # elements of a generated input: a CPU run stays quick


@st.composite
def prologues(draw):
    """(source, x's shape, y's shape, dtype, kind): `h = unary(x)`, `h = h op y` with y broadcast along
    some of x's axes, then a reduction (or a pair) over axes that keep the innermost one."""
    rank = draw(st.integers(2, 4))
    shape = [draw(st.sampled_from((2, 3, 7, 12))) for _ in range(rank - 1)]
    shape.append(draw(st.sampled_from((2, 5, 12, 16, 64, 150))))
    kind = draw(st.sampled_from(tuple(REDUCE)))
    if kind in PAIRS:
        axes = (draw(st.integers(0, rank - 2)),)
    else:
        axes = tuple(sorted(draw(st.lists(st.integers(0, rank - 2), min_size=1, max_size=rank - 1, unique=True))))
    for a in axes:
        shape[a] = draw(st.sampled_from((2, 17, 130, 600)))
    while _numel(shape) > MOST:  # the largest outer axis halved (kept at 2 or more)
        a = max(range(rank - 1), key=lambda i: shape[i])
        shape[a] = max(2, shape[a] // 2)
    y_shape = tuple(d if draw(st.booleans()) else 1 for d in shape)
    body = f"    h = {draw(st.sampled_from(UNARY))}\n    h = {draw(st.sampled_from(WITH_Y))}\n"
    text = two_functions(body, REDUCE[kind].format(axes=axes, axis=axes[0]))
    dtype = draw(st.sampled_from((torch.float32, torch.float16, torch.bfloat16)))
    return text, tuple(shape), y_shape, dtype, kind, axes


def two_functions(body: str, reduction: str) -> str:
    """A module's source: `f(x, y)`, `body` then `return <reduction>`, and `prologue(x, y)`, `body` then h."""
    return ("import torch\nimport torch.nn.functional as F\n\n\ndef f(x, y):\n" + body + f"    return {reduction}\n"
            "\n\ndef prologue(x, y):\n" + body + "    return h\n")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def check_reduction(got, want, h, kind, axes, dtype):
    """A reduction's result against torch's; a pair's indices by the values at them: a half `h`
    computed another way may round two near-equal elements the other way round."""
    if kind not in PAIRS:
        return check(got, want, dtype, _numel([h.shape[a] for a in axes]))
    tol = 2e-2 if dtype in HALF else 1e-5
    index = got if kind in ("argmax", "argmin") else got[1]
    keep = index if kind == "min" else index.unsqueeze(axes[0])
    peak = (h.amax if kind in ("argmax", "max") else h.amin)(axes[0], keepdim=True)
    assert index.dtype == torch.int64 and index.shape == (want if kind in ("argmax", "argmin") else want[1]).shape
    torch.testing.assert_close(torch.gather(h, axes[0], keep), peak, rtol=tol, atol=tol, equal_nan=True)
    if kind in ("max", "min"):
        torch.testing.assert_close(got[0], want[0], rtol=tol, atol=tol, equal_nan=True)


def reducing(k) -> list:
    return [kk for kk in k.fusion if any(op.op in (*REDUCTIONS, *PAIR_OPS) for op in kk.ops)]


@settings(max_examples=8, deadline=None)
@given(prologues())
def test_gpu_prologues_and_pairs_take_the_rule(tmp_dir, case):
    """For sm_90: each generated kernel reducing over outer or middle axes is OuterReduction's (p104:
    silu and a broadcast divide before an amax over axis 0 of (8192, 32, 12, 16) was on Fallback);
    a pair is one kernel for its values and indices."""
    text, shape, y_shape, dtype, kind, _ = case
    f = module(text, tmp_dir).f
    k = bt.jit(target=SM90)(f).compile(torch.empty(shape, dtype=dtype, device="meta"),
                                       torch.empty(y_shape, dtype=dtype, device="meta"))
    assert reducing(k) and all(kk.rule in GPU_OUTER for kk in reducing(k)), k.fusion
    assert not any(kk.rule == "dlight.gpu.Fallback" and "cast" not in kk.name for kk in k.fusion), k.fusion


@settings(max_examples=6, deadline=None)
@given(prologues())
def test_cpu_prologues_and_pairs_match_torch(tmp_dir, case):
    text, shape, y_shape, dtype, kind, axes = case
    if dtype == torch.bfloat16 and kind in PAIRS:
        dtype = torch.float16  # see test_cpu_bfloat16_pair_with_a_kept_buffer_builds
    programs = module(text, tmp_dir)
    x, y = make(shape, dtype), make(y_shape, dtype, seed=1)
    got = bt.jit(target="cpu")(programs.f)(x, y)
    check_reduction(got, programs.f(x, y), programs.prologue(x, y), kind, axes, dtype)


def silu_over_broadcast_argmax(x, y):
    return (F.silu(x) / (1.0 + y * y)).argmax(0)


def test_cpu_bfloat16_pair_with_a_kept_buffer_builds():
    """A bfloat16 argmax after math over a broadcast: its prologue, once kept as a buffer inside the
    pair reduction, failed TVM's CPU build (storage_rewrite: 'Load/Store of buffer T_add_intermediate
    occurred before its declaration'); the math is now a block of its own before the argmax."""
    x, y = make((2, 2, 2), torch.bfloat16), make((1, 1, 1), torch.bfloat16, seed=1)
    torch.testing.assert_close(bt.jit(target="cpu", cache=False)(silu_over_broadcast_argmax)(x, y),
                               silu_over_broadcast_argmax(x, y))


def pairs(a: bt.Tensor((967, 320), "float16"), b: bt.Tensor((138, 128, 150), "float16"),
          c: bt.Tensor((805, 12, 64), "float16"), d: bt.Tensor((4096, 32, 12, 16), "float32"),
          g: bt.Tensor(("n", 12, 64), "float32"), h: bt.Tensor((97, 7, 33), "bfloat16"),
          i: bt.Tensor((300, 4099), "float32"), j: bt.Tensor((8192, 32, 12, 16), "float32"),
          y: bt.Tensor((1, 32, 12, 16), "float32"), w: bt.Tensor((138, 128, 1500), "float32")):
    """argmax/argmin and max.dim over outer and middle axes (odd, prime, symbolic extents); p104's
    prologue with a broadcast input; tiles that are no rectangle of the kept axes ((128, 150) in
    float16 and (128, 1500): p56's max was on Fallback); parts over a tile of two kept axes."""
    vals, idx = b.max(dim=0)
    low, where = w.min(dim=0)
    return (a.argmax(0), vals, idx, c.float().argmin(1), c.max(dim=0), d.amax(0), g.argmax(1), g.argmin(0),
            h.argmax(1), h.min(dim=0), i.argmax(0), (F.silu(j).abs() / (1.0 + y * y)).amax(0), low, where)


def test_gpu_pairs_and_tiles_compile_with_nvcc():
    """Every reduction of `pairs` on OuterReduction, each max.dim one kernel; no (index, value) update
    in vectors (TVM stored the last lane's pair in every lane: `make_longlong4(v, v, v, v)`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = bt.jit(target=SM90)(pairs).compile()
    assert all(kk.rule in GPU_OUTER for kk in reducing(k)), k.fusion
    assert len(reducing(k)) == 12, k.fusion  # 14 results, 3 max.dim pairs, one kernel each; 1 amax each
    assert not re.search(r"make_\w+\((v_\w+)(, \1)+\)", k.source)
    assert "make_longlong" not in k.source
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


def values_and_indices(x):
    vals, idx = x.max(dim=1)
    return vals, idx, x.min(dim=0, keepdim=True), x.argmax(-1)


def test_max_dim_is_one_reduction_on_a_gpu():
    """torch's max.dim/min.dim: one kernel gives the values and the indices (max_argmax.py), over a
    middle axis, an outer one (keepdim) and the innermost; the plain argmax stays one kernel."""
    x = torch.empty(64, 100, 96, device="meta")
    k = bt.jit(target=SM90)(values_and_indices).compile(x)
    assert [kk.rule for kk in k.fusion] == ["OuterReduction", "OuterReduction", "InnerReduction"], k.fusion
    assert [len(kk.cuda_kernels) for kk in k.fusion] == [1, 1, 1], k.fusion
    # (on a CPU no pair: max and argmax are two reductions, which FuseMultiOutput puts in one kernel)
    assert "_value" not in bt.jit(target="cpu")(values_and_indices).compile(torch.randn(4, 5, 6)).stages["FuseTIR"]


def with_ties_and_nan(shape, dtype, device="cpu"):
    """Small integers (many ties: the first index wins), a NaN in some columns (it wins), -inf."""
    x = torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    flat = x.view(-1, shape[-1])
    flat[min(5, flat.shape[0] - 1), 1 % shape[-1]] = float("nan")
    flat[flat.shape[0] // 2, shape[-1] - 1] = float("nan")
    flat[0, 0] = float("-inf")
    return x.to(device)


def arg_pairs_once(x):
    vals, idx = x.max(dim=0)
    return vals, idx, x.min(dim=1), x.argmin(1), x.amax(1)


@pytest.mark.parametrize("shape, dtype", [((805, 12, 64), torch.float32), ((97, 7, 33), torch.bfloat16),
                                          ((2, 3, 1), torch.float16), ((130, 5, 2), torch.float32)])
def test_the_pairs_reduction_matches_torch_on_a_cpu(monkeypatch, shape, dtype):
    """The one (index, value) reduction of max.dim (GPU-only in the pipeline) run on a CPU: the values
    are torch's, NaN and -inf included, the indices the first of ties or NaNs."""
    from babytriton.passes import max_argmax
    monkeypatch.setattr(max_argmax, "applies", lambda target: True)
    x = with_ties_and_nan(shape, dtype)
    k = bt.jit(target="cpu", cache=False)(arg_pairs_once)  # (the disk cache holds the two-kernel form)
    assert "max_argmax" not in str(k.compile(x).fusion) and len(reducing(k.compile(x))) <= 4, k.compile(x).fusion
    for g, w in zip(k(x), arg_pairs_once(x)):
        for gg, ww in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
            torch.testing.assert_close(gg, ww, equal_nan=True, rtol=0, atol=0)


# -- on a GPU: pairs, prologues and the programs that were slow, against torch there ---------------
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(805, 12, 64), (138, 128, 150), (3, 1000, 40), (97, 7, 33), (2, 3, 1),
                                   (967, 2, 320), (1000, 3, 4099), (3545, 1, 1000), (967, 1, 3200)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_pairs_match_torch(shape, dtype):
    x = with_ties_and_nan(shape, dtype, "cuda")
    for g, w in zip(bt.jit(target="gpu")(arg_pairs_once)(x), arg_pairs_once(x)):
        for gg, ww in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
            torch.testing.assert_close(gg, ww, equal_nan=True, rtol=0, atol=0)


def symbolic_pairs(x: bt.Tensor(("n", "s", 64), "float32")):
    return x.argmax(0), x.argmin(1), x.max(dim=0), x.amax(0)


@pytest.mark.gpu
def test_gpu_symbolic_pairs_and_slow_programs_match_torch(tmp_dir):
    k = bt.jit(target="gpu")(symbolic_pairs)
    for shape in [(1, 1, 64), (805, 12, 64), (5, 3000, 64), (4097, 2, 64)]:
        x = with_ties_and_nan(shape, torch.float32, "cuda")
        for g, w in zip(k(x), symbolic_pairs(x)):
            for gg, ww in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
                torch.testing.assert_close(gg, ww, equal_nan=True, rtol=0, atol=0)
    for name, x_shape, y_shape, dtype in [("p104", (8192, 32, 12, 16), (1, 32, 12, 16), torch.float32),
                                          ("p46", (967, 32000), (1, 32000), torch.float16),
                                          ("p56", (138, 128, 1500), (138, 128, 1), torch.float32)]:
        kind = "amax" if name == "p104" else "max"
        body = "    h = F.silu(x).abs() / (1.0 + y * y)\n"
        programs = module(two_functions(body, REDUCE[kind].format(axes=0, axis=0)), tmp_dir)
        x, y = make(x_shape, dtype).cuda(), make(y_shape, dtype, seed=1).cuda()
        check_reduction(bt.jit(target="gpu")(programs.f)(x, y), programs.f(x, y), programs.prologue(x, y), kind,
                        (0,), dtype)


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(prologues())
def test_gpu_prologues_and_pairs_match_torch(tmp_dir, case):
    text, shape, y_shape, dtype, kind, axes = case
    programs = module(text, tmp_dir)
    x, y = make(shape, dtype).cuda(), make(y_shape, dtype, seed=1).cuda()
    got = bt.jit(target="gpu")(programs.f)(x, y)
    check_reduction(got, programs.f(x, y), programs.prologue(x, y), kind, axes, dtype)


# -- epilogues that return several of their values (p158: `h = q.float().mean(0)`, steps over the --
# -- kept shape, `return h, h.abs().mean(1)`): every value right, none read before it is stored ----
STEPS = ("{h} * 0.5", "torch.maximum({h}, y)", "{h}.abs()", "{h} + 0.1 * y", "torch.tanh({h})", "{h} * y")
STORE = r"(?:(\w+_ptr)\[[^;]*?\]|\*\(\w+\*\)\((\w+_ptr) [^;]*?\)) = "


@st.composite
def returned_chains(draw):
    """(source, x's shape, y's shape): `h` reduced over outer axes, then two to four element-wise
    steps over the kept shape; the last step's value and some earlier ones are returned."""
    rank = draw(st.integers(2, 4))
    shape = [draw(st.sampled_from((2, 5, 33, 230))) for _ in range(rank - 1)]
    shape.append(draw(st.sampled_from((8, 64, 100, 512))))
    axes = tuple(sorted(draw(st.lists(st.integers(0, rank - 2), min_size=1, max_size=rank - 1, unique=True))))
    while _numel(shape) > MOST:
        a = max(range(rank - 1), key=lambda i: shape[i])
        shape[a] = max(2, shape[a] // 2)
    steps = draw(st.lists(st.sampled_from(STEPS), min_size=2, max_size=4))
    kept = draw(st.lists(st.integers(0, len(steps) - 2), min_size=1, unique=True))
    body = f"    h = x.float().mean({axes})\n" + "".join(
        f"    h{i} = {step.format(h=f'h{i - 1}' if i else 'h')}\n" for i, step in enumerate(steps))
    returned = ", ".join(f"h{i}" for i in sorted(kept) + [len(steps) - 1])
    y_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return f"import torch\n\n\ndef f(x, y):\n{body}    return {returned}\n", tuple(shape), y_shape


@settings(max_examples=10, deadline=None)
@given(returned_chains())
def test_returned_epilogue_values_match_torch_and_are_stored_before_read(tmp_dir, case):
    """On the CPU against torch; for sm_90, no kernel stores a value in one thread of a block (the
    thread holding a cross-thread result) and reads it back in the others."""
    text, shape, y_shape = case
    f = module(text, tmp_dir).f
    x, y = make(shape, torch.float32), make(y_shape, torch.float32, seed=1)
    check(bt.jit(target="cpu")(f)(x, y), f(x, y), torch.float32, max(shape))
    k = bt.jit(target=SM90)(f).compile(x, y)
    assert not stored_then_read_by_others(k.source), (text, stored_then_read_by_others(k.source))


@pytest.mark.gpu
@settings(max_examples=20, deadline=None)
@given(returned_chains())
def test_gpu_returned_epilogue_values_match_torch(tmp_dir, case):
    text, shape, y_shape = case
    f = module(text, tmp_dir).f
    x, y = make(shape, torch.float32).cuda(), make(y_shape, torch.float32, seed=1).cuda()
    check(bt.jit(target="gpu")(f)(x, y), f(x, y), torch.float32, max(shape))


def test_the_race_check_finds_a_store_read_by_other_threads():
    racy = ("__global__ void k(float* __restrict__ out_ptr, float* __restrict__ a_ptr) {\n"
            "  if (((int)threadIdx.y) == 0) {\n    out_ptr[threadIdx.x] = 1.0f;\n  }\n"
            "  a_ptr[threadIdx.x] = fabsf(out_ptr[threadIdx.x]);\n}\n")
    assert stored_then_read_by_others(racy) == [("k", "out_ptr")]
    assert stored_then_read_by_others(racy.replace("fabsf(out_ptr[threadIdx.x])", "2.0f")) == []


def stored_then_read_by_others(source: str) -> list:
    """(kernel, buffer) pairs where a CUDA kernel stores a global buffer (a parameter) only inside `if
    (threadIdx.? == 0)` and reads it outside such a block: the block's other threads would read it
    before it is stored (no barrier orders global stores; shared ones are read after one)."""
    found = []
    for name, params, body in _kernels(source):
        guarded = [body[m.end():_closing(body, m.end())] for m in re.finditer(
            r"if \(\(\(int\)threadIdx\.[xyz]\) == 0\) \{", body)]
        outside = body
        for block in guarded:
            outside = outside.replace(block, "")
        stored = {a or b for a, b in re.findall(STORE, "".join(guarded))}
        found += [(name, buf) for buf in sorted(stored & set(re.findall(r"\w+_ptr", params)))
                  if re.search(rf"\b{buf}\b", re.sub(STORE, "", outside))]
    return found


def _kernels(source: str):
    for m in re.finditer(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\) \{", source):
        yield m.group(1), m.group(2), source[m.end():_closing(source, m.end())]


def _closing(text: str, start: int) -> int:
    """The index of the `}` closing a block whose `{` ends just before `start`."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)
