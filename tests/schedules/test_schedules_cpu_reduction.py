"""CPUReduction (babytriton/schedules/cpu_reduction.py) on rows of any length: odd, prime, short and
long rows are reduced in vectors of partial results with a scalar tail (`with_tails`), their
element-wise epilogues vectorised the same way, the rows in parallel; few long rows are cut into
chunks. Every result against torch, with NaN and inf, float16 and bfloat16, symbolic and empty sizes."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.testing.fuzz.checking import load

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=2e-2),
       torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}


def softmax(x):
    m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def gelu_mean(x):
    return F.gelu(x).mean(dim=-1)


def rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def quantise(x):
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-5) / 127.0
    return torch.clamp(torch.round(x / scale), -127, 127)


def softmax_any(x: bt.Tensor(("n", "w"), "float32")):
    return softmax(x)


def gelu_mean_any(x: bt.Tensor(("n", "w"), "float32")):
    return gelu_mean(x)


def reference_gelu_mean(x):
    """torch's gelu_mean in float64: torch's vectorised float32 gelu gives NaN for +inf on some CPUs
    (AVX-512: erf's polynomial) and inf on others and in its scalar loop; its float64 path gives inf."""
    return gelu_mean(x.double()).to(x.dtype)


def with_specials(rows, width, dtype=torch.float32, seed=0):
    """Random rows with a NaN, an inf, a -inf and a row of -inf where there are rows enough."""
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed)) * 3
    if rows >= 4 and width >= 8:
        x[0, width // 2], x[1, width - 1], x[2, 3], x[3] = math.nan, math.inf, -math.inf, -math.inf
    return x.to(dtype)


def vector_ops(source: str) -> int:
    """Float vector instructions in LLVM IR (<16 x float> with AVX-512, <8 x float> with AVX2)."""
    return len(re.findall(r"= (?:fadd|fmul|fsub|fdiv|call) .*<\d+ x float>", source))


def only_kernel(k):
    (kernel,) = [kernel for kernel in k.fusion if kernel.rule != "none"]
    return kernel


@pytest.fixture(scope="module")
def compiled_softmax_139():
    x = with_specials(64, 139)
    return bt.jit(target="cpu")(softmax).compile(x)


def test_an_odd_row_is_vectors_and_a_tail(compiled_softmax_139):
    """Rows of 139 (no power of two divides them): the max, the exp-sum and the division each run
    in whole vectors without a predicate, then one tail block for the last elements."""
    k = compiled_softmax_139
    kernel = only_kernel(k)
    assert kernel.rule == "CPUReduction" and "vector" in kernel.launch, kernel
    scheduled = k.stages["schedule"]
    assert scheduled.count('_rf_update_tail"') == 2 and 'T_divide_tail"' in scheduled, scheduled
    assert vector_ops(k.source) >= 10


@pytest.mark.parametrize("seed", [0, 1])
def test_an_odd_row_softmax_matches_torch(compiled_softmax_139, seed):
    x = with_specials(64, 139, seed=seed)
    torch.testing.assert_close(compiled_softmax_139(x), torch.softmax(x, -1), equal_nan=True, **TOL[torch.float32])


@pytest.mark.parametrize("rows, width", [(97, 2035), (64, 33)])
def test_gelu_then_mean_is_one_vectorised_row_kernel(rows, width):
    """The gelu inlined into the mean's vectors of partial sums (its erf the float32 polynomial)."""
    x = with_specials(rows, width)
    k = bt.jit(target="cpu")(gelu_mean).compile(x)
    kernel = only_kernel(k)
    assert kernel.rule == "CPUReduction" and "vector" in kernel.launch, kernel
    assert "_tail" in k.stages["schedule"] and vector_ops(k.source)
    torch.testing.assert_close(k(x), reference_gelu_mean(x), equal_nan=True, **TOL[torch.float32])


@pytest.mark.parametrize("rows, width", [(0, 9), (1, 1), (5, 7), (6, 16), (9, 17), (8, 139), (4, 1000), (3, 2035)])
def test_symbolic_widths_match_torch(rows, width):
    """One compiled version of each for every size: the tail's bound and the number of whole vectors
    are expressions of the width, from none (a row shorter than a vector) to hundreds."""
    x = with_specials(rows, width)
    torch.testing.assert_close(bt.jit(target="cpu")(softmax_any)(x), torch.softmax(x, -1), equal_nan=True,
                               **TOL[torch.float32])
    torch.testing.assert_close(bt.jit(target="cpu")(gelu_mean_any)(x), reference_gelu_mean(x), equal_nan=True,
                               **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_odd_rows_match_torch(dtype):
    """Half rows of a prime length, read as halves and reduced in float32 vectors, NaN and inf kept."""
    x = with_specials(16, 1009, dtype)
    k = bt.jit(target="cpu")(softmax).compile(x)
    assert "vector" in only_kernel(k).launch
    torch.testing.assert_close(k(x), torch.softmax(x.float(), -1).to(dtype), equal_nan=True, **TOL[dtype])


def test_few_long_prime_rows_are_cut_into_chunks():
    """Three rows of 50,257 (a prime): each row cut into chunks reduced in parallel, a chunk's ragged
    end (of the row, not of a vector) left to its predicate; then the quantised rows."""
    x = with_specials(3, 50257)
    x[1, 50000], x[2, 3] = math.inf, math.nan  # an inf at the last chunk's end; a NaN row
    k = bt.jit(target="cpu")(quantise).compile(x)
    assert any(kernel.rule == "CPUReduction" for kernel in k.fusion)
    torch.testing.assert_close(k(x), quantise(x), equal_nan=True, rtol=0, atol=0)


@settings(max_examples=4, deadline=None)
@given(rows=st.integers(1, 70), width=st.integers(1, 300))
def test_rms_norm_over_generated_sizes_matches_torch(rows, width):
    x, w = with_specials(rows, width), torch.randn(width)
    k = bt.jit(target="cpu")(rms_norm).compile(x, w)
    torch.testing.assert_close(k(x, w), rms_norm(x, w), equal_nan=True, **TOL[torch.float32])


def block_runs(k, name: str) -> int:
    """At most how many times the scheduled kernels run the blocks whose name starts with `name` (the
    product of the loop extents around each, a ragged tail's by its bound)."""
    import tvm
    from tvm import s_tir, tirx
    bound = tvm.sym.Analyzer().const_int_bound

    def walk(node, times):
        if isinstance(node, tirx.For):
            return walk(node.body, times * bound(node.extent).max_value)
        if isinstance(node, tirx.SeqStmt):
            return sum(walk(s, times) for s in node.seq)
        if isinstance(node, s_tir.SBlockRealize):
            return (times if node.block.name_hint.startswith(name) else 0) + walk(node.block.body, times)
        return sum(walk(getattr(node, f), times) for f in ("body", "then_case", "else_case")
                   if getattr(node, f, None) is not None)
    mod = tvm.script.from_source(k.stages["schedule"])
    return sum(walk(f.body, 1) for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc))


def norm_outer_inner(x):
    """A norm over a leading and the last axis, scaling the input: its results lie along the middle."""
    return x / torch.linalg.vector_norm(x, dim=(0, 2), keepdim=True).clamp_min(1e-6)


def norm_outer_inner_any(x: bt.Tensor(("n", 24, 3), "float32")):
    return norm_outer_inner(x)


@settings(max_examples=4, deadline=None)
@given(shape=st.tuples(st.integers(65, 300), st.integers(64, 200), st.integers(2, 5)))
def test_results_along_a_middle_axis_are_computed_once(shape):
    """A reduction whose results lie along the consumer's middle axis is not computed per row of the
    consumer's first axis (that computed every result again for each of 256 rows: 60 ms for 0.3):
    the sum's update runs once per input element."""
    x = torch.randn(shape)
    k = bt.jit(target="cpu")(norm_outer_inner).compile(x)
    assert only_kernel(k).rule == "CPUReduction"
    assert block_runs(k, "gv1_red") < 2 * x.numel(), k.stages["schedule"]
    torch.testing.assert_close(k(x), norm_outer_inner(x), **TOL[torch.float32])


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_results_along_a_middle_axis_of_symbolic_size_match_torch(n):
    x = with_specials(n * 24, 3).reshape(n, 24, 3) if n else torch.randn(0, 24, 3)
    torch.testing.assert_close(bt.jit(target="cpu")(norm_outer_inner_any)(x), norm_outer_inner(x), equal_nan=True,
                               **TOL[torch.float32])


# -- bfloat16 math inlined into an (index, value) step: a `let` value TVM's legalization skips ----

def abs_argmax(x):
    return torch.argmax(torch.abs(x), dim=-1)


def exp_argmin(x):
    return torch.argmin(torch.exp(x), dim=-1)


def scaled_root_argmax(x):
    return torch.argmax(torch.sqrt(torch.abs(x)) * 3.0 - 1.0, dim=-1)


def clipped_argmin_columns(x):
    return torch.argmin(torch.clamp(x, -1.0, 1.0) * 2.0, dim=0)


@pytest.mark.parametrize("f, shape", [(abs_argmax, (40000,)), (exp_argmin, (40000,)),
                                      (scaled_root_argmax, (40000,)), (clipped_argmin_columns, (3, 64))])
def test_bfloat16_math_in_an_argmax_step_matches_torch(f, shape):
    """Chunked (CPUReduction's rfactor), the step's bfloat16 `fabs` met TVM's uint16 retyping of the
    input and LLVM crashed the process (fuzz seed 40); `exp`, `sqrt`, `clamp` failed the build or
    crashed. Computed in float32 (rounded only at stores, as TVM's bfloat16 is), the index found holds
    torch's extreme value."""
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 3).to(torch.bfloat16)
    k = bt.jit(target="cpu")(f).compile(x)
    assert only_kernel(k).rule in ("CPUReduction", "CPUOuterReduction")
    value = {abs_argmax: torch.abs, exp_argmin: torch.exp, scaled_root_argmax: lambda v: torch.sqrt(v.abs()),
             clipped_argmin_columns: lambda v: torch.clamp(v, -1.0, 1.0)}[f]
    for special in (None, math.inf, -math.inf, math.nan):
        if special is not None:
            x.view(-1)[37] = special
        got, want = k(x), f(x)
        picked = [torch.gather(value(x).float(), 0, i.unsqueeze(0)) for i in (got, want)]
        torch.testing.assert_close(picked[0], picked[1], equal_nan=True, rtol=0, atol=0)


# -- math before an (index, value) reduction: computed once per element, not in the combiner -------

def gumbel_argmax(logits, u):
    return torch.argmax(logits / 0.7 - torch.log(-torch.log(u)), dim=-1)


def exp_argmin_rows(logits, u):
    return torch.argmin(torch.exp(logits) * u, dim=-1)


def tanh_argmax_rows(logits, u):
    return torch.argmax(torch.tanh(logits) + torch.sigmoid(u), dim=-1)


def reduction_blocks_math(k) -> tuple[list, list]:
    """For the blocks of the scheduled kernels that reduce (an argmax's max and first index, argmax_as_max.py),
    and for the others: how many long-latency math calls (exp, log, tanh, ...) each body makes."""
    import tvm
    import tvm_ffi
    from tvm import s_tir, tirx
    from babytriton.schedules.analysis import LONG_LATENCY_CALLS
    mod = tvm.script.from_source(k.stages["schedule"])
    blocks, reducing, others = [], [], []
    for _, f in mod.functions_items():
        if isinstance(f, tirx.PrimFunc):
            tvm_ffi.structural_walk(f.body, (s_tir.SBlock, blocks.append))
    for block in blocks:
        found = []
        tvm_ffi.structural_walk(block.body, (tvm.ir.expr.Call, found.append))
        calls = sum(isinstance(c.op, tvm.ir.Op) and c.op.name in LONG_LATENCY_CALLS for c in found)
        (reducing if any(iv.iter_type == tirx.IterVar.CommReduce for iv in block.iter_vars) else others).append(calls)
    return reducing, others


@settings(max_examples=12, deadline=None)
@given(f=st.sampled_from([gumbel_argmax, exp_argmin_rows, tanh_argmax_rows]),
       rows=st.sampled_from([1, 4, 70]), width=st.integers(1, 300), seed=st.integers(0, 3))
def test_math_before_an_argmax_is_computed_once_per_element(f, rows, width, seed):
    """The NaN-aware combiner of (index, value) pairs named its value nine times: inlined, the two
    fast-math logs of Gumbel-max sampling were nine copies each, and TVM's LLVM code generator spent
    30 s simplifying them (the corpus case took 36 s to compile). Now the row's max and the first
    index holding it both read the math (argmax_as_max.py): it is a block of its own, computed once
    (a vectorised row before the reductions); no reduction step calls math. Indices as torch's, with
    NaN, inf and tied values (the first index wins)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, width, generator=g) * 3
    u = torch.rand(rows, width, generator=g).clamp_min(1e-6)
    if width >= 6:
        logits[:, 5] = logits[:, 2]         # a tie: the first index wins
        u[:, 5] = u[:, 2]
        logits[0, 4] = math.inf
        logits[-1, width - 1] = math.nan
    k = bt.jit(target="cpu")(f).compile(logits, u)
    if [kernel.rule for kernel in k.fusion] == ["CPUReduction"]:  # (a row of one: element-wise; little work: serial)
        reducing, others = reduction_blocks_math(k)
        assert reducing and not any(reducing) and any(others), (reducing, others)
    torch.testing.assert_close(k(logits, u), f(logits, u), rtol=0, atol=0)


def test_gumbel_argmax_names_each_log_once_per_vector_block():
    """Before: 18 log calls (two in each of the combiner's nine copies); now each computing block (the
    vectorised row and its scalar tail) calls the two logs once."""
    logits, u = torch.randn(4, 50), torch.rand(4, 50).clamp_min(1e-6)
    k = bt.jit(target="cpu")(gumbel_argmax).compile(logits, u)
    assert k.stages["schedule"].count("T.log(") <= 4
    assert "T.vectorized" in k.stages["schedule"]
    torch.testing.assert_close(k(logits, u), gumbel_argmax(logits, u), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_short_half_rows_fold_few_partials(dtype):
    """Half rows of 64: about the row's square root in partial results (8 steps of 8, a fold of 8),
    not a register of halves (2 steps of 32 and a serial fold of 32 per row, per reduction)."""
    x = with_specials(64, 64, dtype)
    k = bt.jit(target="cpu")(softmax).compile(x)
    folds = re.findall(r'T\.grid\(T\.int64\((\d+)\), T\.int64\(1\)\):\s*with T\.sblock\("\w+_update"\)',
                       k.stages["schedule"])
    assert folds == ["8", "8"], k.stages["schedule"]
    torch.testing.assert_close(k(x), torch.softmax(x.float(), -1).to(dtype), equal_nan=True, **TOL[dtype])


def log_softmax(x):
    return F.log_softmax(x, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("width", [64, 1000])
def test_a_row_value_with_math_is_computed_once_per_row(width, dtype):
    """A log-softmax's `log(sum)` is a value per row that every element reads: kept a block computed
    once per row, not inlined into the element-wise pass (64 logs a row of 64: 0.4x torch's time)."""
    x = with_specials(37, width, dtype)
    k = bt.jit(target="cpu", cache=False)(log_softmax).compile(x)
    schedule = k.stages["schedule"]
    assert schedule.count("T.log(") == 1 and re.search(r"\[v0, T\.int64\(0\)\] = T\.log\(", schedule), schedule
    torch.testing.assert_close(k(x), F.log_softmax(x.float(), -1).to(dtype), equal_nan=True, **TOL[dtype])


def test_a_step_that_calls_math_sums_a_whole_register_of_partials(cpu_target):
    """A log-softmax's exp-sum over rows of 64 computes each exp in the step: partials fill one vector
    register (16 float32 lanes with AVX-512, 8 with AVX2), not the square root of the row that a step
    of additions takes (8 lanes of exp polynomials did the math twice over: 4.0 ms for 32768 rows on one
    thread, 2.4 in whole registers)."""
    import tvm
    x = with_specials(64, 64)
    k = bt.jit(target=cpu_target, cache=False)(log_softmax).compile(x)
    lanes = 16 if tvm.target.codegen.target_has_features("avx512f", tvm.target.Target(cpu_target)) else 8
    [partials] = re.findall(r"exp_red_intermediate_rf = T\.sblock_alloc_buffer\(\(.*T\.int64\((\d+)\)\)\)",
                            k.stages["schedule"])
    assert int(partials) == lanes, k.stages["schedule"]
    torch.testing.assert_close(k(x), F.log_softmax(x, -1), equal_nan=True, **TOL[torch.float32])


@pytest.fixture(scope="module")
def programs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("twice")


# -- a value with math that one block names twice (a NaN-aware maximum's test and result) -------
MATH = {"F.mish(h)": "T.tanh(", "torch.tanh(h) * h": "T.tanh(", "F.gelu(h)": "T.erf(", "torch.exp(-h * h)": "T.exp("}
PAIRED = ("torch.maximum({h}, y)", "torch.minimum(y, {h})", "torch.clamp({h}, -0.5, 0.5)")


@settings(max_examples=6, deadline=None)
@given(math_=st.sampled_from(sorted(MATH)), paired=st.sampled_from(PAIRED), rows=st.sampled_from([1, 3, 14]),
       width=st.integers(1, 300), dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_math_that_one_block_reads_twice_is_computed_once(programs_dir, math_, paired, rows, width, dtype):
    """p73: `torch.maximum(F.mish(h), y)` before an RMS over rows of 32000. The maximum names its
    operand twice (`h < y or isnan(y)`, then h); inlined there, the Mish's tanh and log ran twice an
    element in a loop that TVM left scalar: 20.7 ms where eager took 3.7 (now 1.3). The operand is a
    block of its own, whose math is named once in its vector loop and once in its tail; against
    torch with NaN and inf."""
    text = ("import torch\nimport torch.nn.functional as F\n\n\ndef f(x, y):\n    h = x.float()\n"
            f"    h = {math_}\n    h = {paired.format(h='h')}\n"
            "    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-12)\n")
    path = programs_dir / f"twice_{abs(hash(text))}.py"
    path.write_text(text)
    f = load(path).f
    x, y = with_specials(rows, width, dtype), with_specials(1, width, seed=1)[0]
    y[:: max(1, width // 3)] = math.nan  # the maximum's NaN test
    k = bt.jit(target="cpu")(f).compile(x, y)
    assert k.stages["schedule"].count(MATH[math_]) <= 2, k.stages["schedule"].count(MATH[math_])
    torch.testing.assert_close(k(x, y), f(x, y), equal_nan=True, **TOL[torch.float32])
