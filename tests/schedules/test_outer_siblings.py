"""Several reductions over the same outer or middle axes of one input (`x.mean(1), x.amax(1)`, batch-norm's
sum and sum of squares, max and argmax over an outer axis): one kernel (FuseMultiOutput), whose schedule
(OuterReduction on the GPU, CPUOuterReduction on the CPU) reads the input once, in one loop nest for all.
Compared with torch on generated shapes, axis sets, kinds and dtypes, NaN/inf, empty dims and symbolic
sizes; their CUDA generated for sm_90 and compiled by nvcc."""
import shutil

import pytest
import torch
import tvm
import tvm_ffi
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir, tirx

import babytriton as bt
from test_schedules_outer import module

SM90 = {"kind": "cuda", "arch": "sm_90"}
HALF = (torch.float16, torch.bfloat16)
# each kind as a user writes it: `{axes}` a tuple of axes, `{axis}` the one axis of an argmax
KINDS = {
    "sum": "x.sum({axes})",
    "mean": "x.mean({axes})",
    "amax": "x.amax({axes})",
    "amin": "x.amin(dim={axes})",
    "squares": "(x * x).sum({axes})",
    "sum32": "x.float().sum({axes}, keepdim=True)",
    "argmax": "x.argmax({axis})",
    "argmin": "x.argmin({axis})",
    "max_dim": "x.max(dim={axis})",
}
ONE_AXIS = ("argmax", "argmin", "max_dim")
PICKS = ("amax", "amin", "argmax", "argmin", "max_dim")  # no arithmetic: exact, NaN where torch's is
REDUCING = ("sum", "mean", "max", "min", "argmax", "argmin", "variance")


def program(kinds, axes, tmp_dir):
    """`def f(x): return <each kind over axes>`, written to a file and imported (babytriton reads source)."""
    terms = ", ".join(KINDS[k].format(axes=axes, axis=axes[0]) for k in kinds)
    text = f"import torch\n\n\ndef f(x):\n    return {terms},\n"
    return module(text, tmp_dir).f


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sibling_programs")


def flat(results) -> list:
    out = []
    for r in results if isinstance(results, (tuple, list)) else (results,):
        out += flat(r) if isinstance(r, (tuple, list)) else [r]
    return out


def check(got, want, dtype, count):
    """Each result against torch's: indices and picked values exactly, sums within the rounding of
    `count` elements (halves: each rounds once more)."""
    got, want = flat(got), flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if not w.is_floating_point():
            assert torch.equal(g, w), (g, w)
            continue
        tol = 2e-2 if w.dtype in HALF or dtype in HALF else 1e-5
        torch.testing.assert_close(g, w, rtol=tol, atol=tol * max(1.0, count ** 0.5), equal_nan=True)


def with_specials(x, seed):
    """Small integers (ties: the first index wins), a NaN, inf and -inf at drawn places."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, x.shape, generator=g).to(x.dtype)
    flat_x = x.view(-1)
    if flat_x.numel():
        for value in ("nan", "inf", "-inf"):
            flat_x[int(torch.randint(flat_x.numel(), (1,), generator=g))] = float(value)
    return x


def reducing(k) -> list:
    """The kernels that reduce (a half max's cast back is an element-wise kernel of the max's ops)."""
    return [kk for kk in k.fusion if any(op.op in REDUCING for op in kk.ops)
            and kk.rule not in ("CPUElementwise", "Elementwise")]


def one_nest(k, kernel) -> bool:
    """Whether the scheduled kernel reads its input in one loop nest for all its reductions: some loop
    holds every reduction block (update or rfactor) that reads a parameter."""
    mod = tvm.script.from_source(k.stages["schedule"], check_well_formed=False)
    func = next(f for g, f in mod.functions_items() if g.name_hint == kernel.name)
    params = [p for p in func.params if tirx.is_buffer_var(p)]

    def readers(stmt) -> set:
        blocks = []
        tvm_ffi.structural_walk(stmt, (s_tir.SBlock, blocks.append))
        return {b.name_hint for b in blocks if any(iv.iter_type == tirx.IterVar.CommReduce for iv in b.iter_vars)
                and any(r.source.same_as(p) for r in b.reads for p in params)}
    every = readers(func.body)
    loops = []
    tvm_ffi.structural_walk(func.body, (tirx.For, loops.append))
    return len(every) > 1 and any(readers(loop) == every for loop in loops)


# -- generated: rank 2-4, the innermost axis kept, 2-3 kinds over one axis set ---------------------
@st.composite
def cases(draw):
    rank = draw(st.integers(2, 4))
    shape = [draw(st.sampled_from((1, 2, 3, 5, 7))) for _ in range(rank - 1)]
    shape.append(draw(st.sampled_from((1, 3, 4, 8, 16, 33, 64, 100))))
    axes = tuple(sorted(draw(st.lists(st.integers(0, rank - 2), min_size=1, max_size=rank - 1, unique=True))))
    reduced = 1
    for a in axes:
        shape[a] = draw(st.sampled_from((2, 3, 17, 64, 130)))
        reduced *= shape[a]
    allowed = [k for k in KINDS if k not in ONE_AXIS or len(axes) == 1]
    kinds = tuple(draw(st.lists(st.sampled_from(allowed), min_size=2, max_size=3, unique=True)))
    dtype = draw(st.sampled_from((torch.float32, torch.float32, torch.float16, torch.bfloat16)))
    return kinds, axes, tuple(shape), dtype, reduced, draw(st.booleans())


@settings(max_examples=14, deadline=None)
@given(cases())
def test_cpu_siblings_match_torch_in_one_kernel(tmp_dir, case):
    kinds, axes, shape, dtype, reduced, specials = case
    f = program(kinds, axes, tmp_dir)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    if specials or all(k in PICKS for k in kinds):
        x = with_specials(x, reduced)
    k = bt.jit(target="cpu")(f)
    check(k(x), f(x), dtype, reduced)
    fused = reducing(k.compile(x))
    # (rows of one column are rows: CPUReduction's)
    assert len(fused) == 1 and (fused[0].rule == "CPUOuterReduction" or shape[-1] == 1), k.compile(x).fusion


@settings(max_examples=6, deadline=None)
@given(cases())
def test_gpu_siblings_build_as_one_kernel(tmp_dir, case):
    """For sm_90: one OuterReduction kernel for all (one launch, two where the rows are cut into parts
    that a second stage folds)."""
    kinds, axes, shape, dtype, _, _ = case
    k = bt.jit(target=SM90)(program(kinds, axes, tmp_dir)).compile(torch.empty(shape, dtype=dtype, device="meta"))
    fused = reducing(k)
    assert len(fused) == 1 and len(fused[0].cuda_kernels) <= 2, k.fusion
    assert fused[0].rule == "OuterReduction" or shape[-1] == 1, k.fusion  # (one column: rows)


# -- the programs of the issue -----------------------------------------------------------------------
def sequence_pooling(x):
    return x.mean(dim=1), x.amax(dim=1)


def batch_stats(x):
    return x.sum(0), (x * x).sum(0), x.amax(0), x.argmax(0)


def test_sequence_pooling_reads_x_once_on_a_cpu():
    x = with_specials(torch.randn(6, 40, 64), 3)
    k = bt.jit(target="cpu")(sequence_pooling)
    check(k(x), sequence_pooling(x), torch.float32, 40)
    (kernel,) = reducing(k.compile(x))
    assert kernel.rule == "CPUOuterReduction" and one_nest(k.compile(x), kernel), k.compile(x).fusion


@pytest.mark.parametrize("shape", [(300, 64), (4096, 32), (19, 48)])
def test_sums_and_pairs_over_axis_0_on_a_cpu(shape):
    """Sums cut into chunks of rows beside a max and an argmax (never cut: read in order), one kernel."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    x[5, 3], x[shape[0] - 1, 7], x[2, 1] = float("nan"), float("inf"), float("-inf")
    k = bt.jit(target="cpu")(batch_stats)
    check(k(x), batch_stats(x), torch.float32, shape[0])
    (kernel,) = reducing(k.compile(x))
    assert one_nest(k.compile(x), kernel), k.compile(x).fusion


def test_ragged_columns_stay_right():
    """Columns no whole vectors tile (a tail loop each): still one kernel, torch's results."""
    for shape in [(50, 3, 13), (7, 130, 33), (2, 5, 1)]:
        x = with_specials(torch.randn(shape), 5)
        check(bt.jit(target="cpu")(sequence_pooling)(x), sequence_pooling(x), torch.float32, shape[1])


@pytest.mark.parametrize("shape", [(0, 5, 8), (3, 0, 8), (3, 5, 0), (0, 0, 0)])
def test_empty_dims(shape):
    def sums(x):
        return x.sum(1), x.mean(1), (x * x).sum(1, keepdim=True)
    x = torch.randn(shape)
    check(bt.jit(target="cpu")(sums)(x), sums(x), torch.float32, 1)
    if shape[1]:  # (torch's max of nothing is an error)
        check(bt.jit(target="cpu")(sequence_pooling)(x), sequence_pooling(x), torch.float32, 1)


def symbolic_pooling(x: bt.Tensor(("b", "s", "h"), "float32")):
    # (the max first: its check that s is not 0 ends a dataflow block, and kernels join within one)
    return x.amax(1), x.mean(1), (x * x).sum(1)


def test_symbolic_sizes():
    k = bt.jit(target="cpu")(symbolic_pooling)
    assert [kk.rule for kk in reducing(k.compile())] == ["CPUOuterReduction"], k.compile().fusion
    for shape in [(1, 1, 1), (3, 70, 5), (2, 33, 64), (4, 2, 48)]:
        x = torch.randn(shape)
        check(k(x), symbolic_pooling(x), torch.float32, shape[1])


@pytest.mark.parametrize("dtype", HALF)
def test_half_dtypes(dtype):
    x = with_specials(torch.randn(4, 65, 48), 2).to(dtype)
    k = bt.jit(target="cpu")(batch_stats)
    check(k(x), batch_stats(x), dtype, 4)
    assert len(reducing(k.compile(x))) == 1, k.compile(x).fusion


def test_dependent_reductions_stay_apart():
    """A reduction of another's result (a variance after its mean) waits for all of it: apart."""
    def centred(x):
        m = x.mean(0)
        return m, ((x - m) ** 2).sum(0)
    x = torch.randn(40, 24)
    check(bt.jit(target="cpu")(centred)(x), centred(x), torch.float32, 40)
    assert len(reducing(bt.jit(target="cpu")(centred).compile(x))) == 2


def issue(a: bt.Tensor((64, 512, 1024), "float32"), b: bt.Tensor((4096, 256), "float16"),
          c: bt.Tensor((805, 12, 64), "bfloat16"), d: bt.Tensor(("n", 12, 64), "float32"),
          e: bt.Tensor((300, 4099), "float32"), g: bt.Tensor((1 << 16, 4), "float32")):
    """Sequence pooling; half sums with a max and an argmax; bfloat16 over a middle axis; symbolic
    rows; a ragged row; a column sum of few columns (cut into parts, folded in a second stage)."""
    return (a.mean(dim=1), a.amax(dim=1), b.float().sum(0), (b * b).sum(0), b.amax(0), b.argmax(0),
            c.mean(1), c.amin(1), c.max(dim=1), d.amax(0), d.sum(0), (d * d).sum(0), e.mean(0), e.amax(0),
            g.sum(0), (g * g).sum(0))


def test_gpu_issue_programs_are_one_kernel_each_and_compile_with_nvcc():
    k = bt.jit(target=SM90)(issue).compile()
    fused = reducing(k)
    assert [kk.rule for kk in fused] == ["OuterReduction"] * 6, k.fusion
    assert [len(kk.cuda_kernels) for kk in fused][:1] == [1], k.fusion  # sequence pooling: one launch
    assert all(one_nest(k, kk) for kk in fused), k.fusion
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 512, 1024), (7, 130, 33), (3, 1000, 40)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_siblings_match_torch(shape, dtype):
    x = with_specials(torch.randn(shape), 4).to(dtype).cuda()

    def pooled(x):
        return x.mean(1), x.amax(1), x.max(dim=0), x.float().sum(0), x.argmin(0)
    check(bt.jit(target="gpu")(pooled)(x), pooled(x), dtype, max(shape))
