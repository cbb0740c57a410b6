"""Reductions over outer or middle axes: OuterReduction (GPU) and CPUOuterReduction (CPU), compared
with torch on generated shapes, axis sets and dtypes, NaN/inf, empty axes, symbolic sizes and
non-contiguous inputs; their CUDA generated for sm_90 and compiled by nvcc; on a GPU, compared there."""
import hashlib
import importlib.util
import shutil
import warnings

import pytest
import torch
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton import schedules

SM90 = {"kind": "cuda", "arch": "sm_90"}
OUTER_RULES = ("OuterReduction", "CPUOuterReduction")
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
    text = f"import torch\n\n\ndef f(x):\n    return {FORMS[form].format(axes=axes)}\n"
    if text not in _programs:
        path = tmp_dir / f"outer_{hashlib.sha1(text.encode()).hexdigest()[:12]}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _programs[text] = module.f
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
        assert "OuterReduction" in rules(k) and not any(kk.rule == "dlight.gpu.Fallback" for kk in reducing), \
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
    assert rules(k).count("OuterReduction") == 15 and set(rules(k)) == {"OuterReduction", "Elementwise"}, k.fusion
    assert "float4" in k.source  # whole vectors of columns where they tile the rows
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


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
    ("mean", (1,), (4, 8192, 1000), torch.float16), ("sum", (0,), (1 << 20, 4), torch.float32)],
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
