"""Element-wise kernels of every layout (issue 28): inputs read across their contiguous axis (`a + b.T`,
permutes) go through tiles (GPU: Tiled, shared memory; CPU: CPUTiled, cache-sized tiles), ragged and
symbolic sizes get whole vectors and a scalar tail (Elementwise), other reads (a slice at an odd
offset, a gather, a broadcast across an odd row) are read in place. Results against torch on the CPU;
the CUDA generated for sm_90 and compiled by nvcc; the same programs against torch on a GPU (`gpu`)."""
import math
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import Phase, assume, example, given, settings
from hypothesis import strategies as st

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8}
GPU_RULES = ("Tiled", "Elementwise")


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def assert_builds_with_nvcc(k) -> None:
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


def values(shape, dtype: str, seed: int, device: str = "cpu", special: bool = True) -> torch.Tensor:
    """Random values of `dtype`, with a NaN, +inf and -inf among them (floats, `special`)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == "int8":
        return torch.randint(-100, 100, shape, generator=gen, dtype=torch.int8).to(device)
    x = torch.randn(shape, generator=gen)
    if special and x.numel() >= 3:
        flat = x.view(-1)
        flat[x.numel() // 3], flat[x.numel() // 2], flat[-1] = float("nan"), float("inf"), -float("inf")
    return x.to(DTYPES[dtype]).to(device)


def close(got, expected) -> None:
    if expected.dtype == torch.bfloat16:  # one rounding of bfloat16 apart (torch.compile is, too)
        torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2, equal_nan=True)
    elif expected.dtype == torch.float16:
        # nvcc contracts a * b + c into one fma, eager rounds a * b first (torch.compile differs from
        # eager as much): one float16 rounding of a product up to ~16 is 16 * 2^-11, about 8e-3. On an
        # x86 CPU without native halves, LLVM narrows the float32 math of two halves back to half
        # operations, then promotes a vector of them to float32 without rounding between the product
        # and the sum (CPUTiled's x.permute(p) * y + s: 1 ulp off eager in 4% of elements)
        torch.testing.assert_close(got, expected, atol=1e-2, rtol=1e-2, equal_nan=True)
    else:  # float32
        torch.testing.assert_close(got, expected, equal_nan=True)


# -- generated permutes -----------------------------------------------------------------------------

def permute_program(stored, perm, dtype, axis):
    """`x.permute(perm) * y + s`: x stored as `stored`, y contiguous in the permuted shape, s broadcast
    along `axis` of it (every axis broadcast once across the examples)."""
    out = tuple(stored[p] for p in perm)
    scale = tuple(1 if i == axis else d for i, d in enumerate(out))

    def f(x: bt.Tensor(stored, dtype), y: bt.Tensor(out, dtype), s: bt.Tensor(scale, dtype)):
        return x.permute(perm) * y + s
    return f, out, scale


@st.composite
def layouts(draw, low: int, high: int):
    """(stored shape, permutation, dtype, broadcast axis): rank 2-4, sides ragged and round, at
    least `low` and at most `high` elements."""
    rank = draw(st.integers(2, 4))
    sides = st.sampled_from((3, 8, 17, 32, 33, 64, 100))
    shape = tuple(draw(sides) for _ in range(rank))
    while math.prod(shape) < low:
        shape = tuple(d * 2 for d in shape)
    while math.prod(shape) > high:  # the longest side halved: stays above high / 2
        longest = shape.index(max(shape))
        shape = shape[:longest] + (shape[longest] // 2,) + shape[longest + 1:]
    perm = tuple(draw(st.permutations(range(rank))))
    return shape, perm, draw(st.sampled_from(tuple(DTYPES))), draw(st.integers(0, rank - 1))


def crosses(stored, perm) -> bool:
    """Whether the permute reads x across its contiguous axis with both tile sides over 8."""
    inner = perm.index(len(perm) - 1)  # the output axis indexed by x's innermost
    return inner != len(perm) - 1 and stored[-1] >= 8 and stored[perm[-1]] >= 8


@settings(max_examples=4, deadline=None)
@given(layouts(1 << 15, 1 << 17), st.integers(0, 1000))
def test_generated_permutes_match_torch_on_the_cpu(layout, seed):
    stored, perm, dtype, axis = layout
    f, out, scale = permute_program(stored, perm, dtype, axis)
    x, y, s = values(stored, dtype, seed), values(out, dtype, seed + 1), values(scale, dtype, seed + 2)
    k = bt.jit(target="cpu")(f).compile()
    close(k(x, y, s), x.permute(perm) * y + s)
    if crosses(stored, perm):
        assert [kernel.rule for kernel in k.fusion] == ["CPUTiled"], str(k.fusion)


def three_permutes(layouts3):
    """Three permute programs (`permute_program`) as one function: three kernels, one nvcc call."""
    (f1, *_), (f2, *_), (f3, *_) = (permute_program(*layout) for layout in layouts3)
    (s1, p1, t1, a1), (s2, p2, t2, a2), (s3, p3, t3, a3) = layouts3
    o1, o2, o3 = (permute_program(*layout)[1:] for layout in layouts3)

    def f(x1: bt.Tensor(s1, t1), y1: bt.Tensor(o1[0], t1), c1: bt.Tensor(o1[1], t1),
          x2: bt.Tensor(s2, t2), y2: bt.Tensor(o2[0], t2), c2: bt.Tensor(o2[1], t2),
          x3: bt.Tensor(s3, t3), y3: bt.Tensor(o3[0], t3), c3: bt.Tensor(o3[1], t3)):
        return x1.permute(p1) * y1 + c1, x2.permute(p2) * y2 + c2, x3.permute(p3) * y3 + c3
    return f


@settings(max_examples=2, deadline=None)
@given(st.lists(layouts(1 << 12, 1 << 16), min_size=3, max_size=3))
def test_generated_permutes_build_for_sm90(layouts3):
    k = bt.jit(target=SM90)(three_permutes(layouts3)).compile()
    assert len(k.fusion) == 3 and all(kernel.rule in GPU_RULES for kernel in k.fusion), str(k.fusion)
    tiled = sum(crosses(stored, perm) for stored, perm, *_ in layouts3)
    assert [kernel.rule for kernel in k.fusion].count("Tiled") == tiled, str(k.fusion)
    assert_builds_with_nvcc(k)


def test_a_transposed_argument_and_an_empty_axis_match_torch():
    def add(a: bt.Tensor((64, 48)), b: bt.Tensor((64, 48))):
        return a + b
    k = bt.jit(target="cpu")(add).compile()
    a, b = values((64, 48), "float32", 1), values((48, 64), "float32", 2).T  # b not contiguous
    close(k(a, b), a + b)

    def empty(a: bt.Tensor((0, 40)), b: bt.Tensor((40, 0))):
        return a + b.T
    e = bt.jit(target="cpu")(empty)
    assert e(torch.randn(0, 40), torch.randn(40, 0)).shape == (0, 40)


# -- the programs of the issue: rules on both devices ------------------------------------------------

def add_transposed(a: bt.Tensor((512, 384)), b: bt.Tensor((384, 512))):
    return a + b.T


def transposed_copy(x: bt.Tensor((8, 256, 96), "float16")):
    return x.transpose(1, 2).contiguous()


def quantise(x: bt.Tensor((256, 384)), s: bt.Tensor((256, 1))):
    return torch.clamp(torch.round(x / s), -128, 127).to(torch.int8)


def clamp_polynomial(x: bt.Tensor((256, 384), "float16"), y: bt.Tensor((256, 384), "float16")):
    t = torch.clamp(x, -2.0, 2.0)
    return 0.5 * t * t * t - 1.5 * t + y


@pytest.mark.parametrize("f, rule", [(add_transposed, "CPUTiled"), (transposed_copy, "CPUTiled"),
                                     (quantise, "CPUElementwise"), (clamp_polynomial, "CPUElementwise")])
def test_cpu_rules_and_results(f, rule):
    k = bt.jit(target="cpu")(f).compile()
    args = [values(p.shape, p.dtype, i, special=f is not quantise) for i, p in enumerate(k.specs)]
    if f is quantise:
        args[1] = args[1].abs() + 0.01
    close(k(*args), f(*args))
    (kernel,) = k.fusion
    assert kernel.rule == rule and "vector" in kernel.launch, str(k.fusion)


def test_quantisation_converts_through_int32_in_vectors():
    """float32 -> int8 goes through int32 as torch's does (2^31 + 773 is 0, not 5), which a CPU
    converts in vectors; through int64 every lane was a scalar conversion."""
    k = bt.jit(target="cpu")(quantise).compile()
    assert '"int64"' not in k.stages["schedule"].split("def quantise")[0].split("def fused")[1]

    def narrow(x: bt.Tensor((8,))):
        return x.to(torch.int8), x.to(torch.uint8), x.to(torch.int16)
    x = torch.tensor([2.0 ** 31 + 773, -2.7, 300.0, 70000.0, -2.0 ** 33 - 3, 3e10, float("inf"), -0.5])
    for got, expected in zip(bt.jit(target="cpu")(narrow)(x), narrow(x)):
        assert torch.equal(got, expected), (got, expected)


def test_a_clamp_against_numbers_is_one_loop_and_keeps_nan():
    """max/min against a number is one compare (the NaN operand is the answer itself): the clamp's
    polynomial inlines whole, no intermediate buffer, and NaN and ±inf still come out as torch's."""
    k = bt.jit(target="cpu")(clamp_polynomial).compile()
    kernel_text = k.stages["schedule"].split("def clamp_polynomial")[0]
    assert "alloc_buffer" not in kernel_text and kernel_text.count("T.parallel") == 1
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, -3.0, 2.0] * 16384, dtype=torch.float16)
    x, y = x.reshape(256, 384), torch.ones(256, 384, dtype=torch.float16)
    close(k(x, y), clamp_polynomial(x, y))


SIDE_PROGRAMS = [add_transposed, transposed_copy, quantise, clamp_polynomial]


# -- ragged and symbolic sizes, odd offsets, gathers -------------------------------------------------

def symbolic_rows(x: bt.Tensor(("n", 37), "float16"), y: bt.Tensor(("n", 37), "float16")):
    return torch.sigmoid(x) * y


def symbolic_flat(x: bt.Tensor(("n",))):
    return x * 2.0 + 1.0


def ragged_bias(x: bt.Tensor((129, 1001)), b: bt.Tensor((1001,))):
    return torch.relu(x + b)


def odd_slice(x: bt.Tensor((64, 1024), "bfloat16")):
    return x[:, 1:] * 2.0


def gathered(x: bt.Tensor((64, 512)), index: bt.Tensor((64, 512), "int64")):
    return torch.gather(x, 1, index) + 1.0


def erf_halves(x: bt.Tensor((33, 62), "float16")):
    h, g = x.chunk(2, dim=-1)
    return h * torch.erf(g)


IRREGULAR = [symbolic_rows, symbolic_flat, ragged_bias, odd_slice, gathered, erf_halves]


def irregular_args(f, n: int = 1000, device: str = "cpu"):
    if f is symbolic_rows:
        return values((n, 37), "float16", 1, device), values((n, 37), "float16", 2, device)
    if f is symbolic_flat:
        return (values((n,), "float32", 3, device),)
    if f is ragged_bias:
        return values((129, 1001), "float32", 4, device), values((1001,), "float32", 5, device)
    if f is odd_slice:
        return (values((64, 1024), "bfloat16", 6, device),)
    if f is gathered:
        return values((64, 512), "float32", 7, device), torch.randint(0, 512, (64, 512), device=device)
    return (values((33, 62), "float16", 8, device),)


def all_programs(a: bt.Tensor((512, 384)), b: bt.Tensor((384, 512)), x: bt.Tensor((8, 256, 96), "float16"),
                 q: bt.Tensor((256, 384)), s: bt.Tensor((256, 1)), c: bt.Tensor((256, 384), "float16"),
                 d: bt.Tensor((256, 384), "float16"), r: bt.Tensor(("n", 37), "float16"),
                 rr: bt.Tensor(("n", 37), "float16"), f: bt.Tensor(("m",)), g: bt.Tensor((129, 1001)),
                 h: bt.Tensor((1001,)), o: bt.Tensor((64, 1024), "bfloat16"), e: bt.Tensor((64, 512)),
                 i: bt.Tensor((64, 512), "int64"), u: bt.Tensor((33, 62), "float16")):
    """The programs above as one: a kernel each, one CUDA source for nvcc."""
    return (add_transposed(a, b), transposed_copy(x), quantise(q, s), clamp_polynomial(c, d),
            symbolic_rows(r, rr), symbolic_flat(f), ragged_bias(g, h), odd_slice(o), gathered(e, i),
            erf_halves(u))


def test_every_program_here_gets_a_rule_of_its_layout_on_sm90_and_builds():
    """Tiled where an input is read across its contiguous axis, Elementwise for the rest (ragged and
    symbolic sizes, odd slices, gathers): no kernel left to Fallback."""
    k = bt.jit(target=SM90)(all_programs).compile()
    rules = sorted(kernel.rule for kernel in k.fusion)
    assert rules == ["Elementwise"] * 8 + ["Tiled"] * 2, str(k.fusion)
    assert_builds_with_nvcc(k)


def test_a_ragged_size_is_whole_vectors_and_a_scalar_tail():
    k = bt.jit(target=SM90)(ragged_bias).compile()  # 129 x 1001: not whole float4 rows, a float4 whole
    schedule = k.stages["schedule"]
    assert "T.vectorized(T.int64(4))" in schedule and '_tail"' in schedule
    assert "*(float4*)(x_ptr + " in k.source and "b_ptr[" in k.source  # b read in place, per lane


@pytest.mark.parametrize("n", [0, 1, 5, 1027])
def test_symbolic_sizes_match_torch_on_the_cpu(n):
    for f in (symbolic_rows, symbolic_flat):
        args = irregular_args(f, n)
        close(bt.jit(target="cpu")(f)(*args), f(*args))


@pytest.mark.parametrize("f", [ragged_bias, odd_slice, gathered, erf_halves])
def test_irregular_kernels_match_torch_on_the_cpu(f):
    args = irregular_args(f)
    close(bt.jit(target="cpu")(f)(*args), f(*args))


# -- on a GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("f", IRREGULAR + SIDE_PROGRAMS)
def test_gpu_kernels_match_torch(f):
    if f in IRREGULAR:
        sizes = (0, 1, 3, 1000, 4099) if f in (symbolic_rows, symbolic_flat) else (None,)
        for n in sizes:
            args = irregular_args(f, n or 1000, "cuda")
            close(bt.jit(target="gpu")(f)(*args), f(*args))
        return
    k = bt.jit(target="gpu")(f).compile()
    args = [values(p.shape, p.dtype, i, "cuda", special=f is not quantise) for i, p in enumerate(k.specs)]
    if f is quantise:
        args[1] = args[1].abs() + 0.01
    close(k(*args), f(*args))


@pytest.mark.gpu
@settings(max_examples=10, deadline=None)
@given(layouts(1 << 10, 1 << 18), st.integers(0, 1000))
def test_generated_permutes_match_torch_on_a_gpu(layout, seed):
    stored, perm, dtype, axis = layout
    f, out, scale = permute_program(stored, perm, dtype, axis)
    x, y, s = (values(shape, dtype, seed + i, "cuda") for i, shape in enumerate((stored, out, scale)))
    close(bt.jit(target="gpu")(f)(x, y, s), x.permute(perm) * y + s)


# -- long chains: intermediates kept in registers ----------------------------------------------------
# A chain whose inlined expression passes MAX_TREE_SIZE (NaN-aware clamps and selects name their operand
# several times) keeps intermediates: each thread computes them per element into registers
# (Elementwise._per_element), its loads and stores 16-byte vectors where every buffer's lanes are
# contiguous, else one element per thread. Fallback inlined them whole and moved scalars.

CHAIN_STEPS = {  # one step of a chain: `h` in, `h` out, `y` a second operand of the chain's shape
    "clamp": "h = h.clamp(-3.0, 3.0)", "mish": "h = F.mish(h)", "gelu": "h = F.gelu(h)",
    "log1p": "h = torch.log1p(h.abs())", "select": "h = torch.where(h > y, h, y * 0.5)",
    "erf": "h = torch.erf(h) * y", "softplus": "h = F.softplus(h)", "rsqrt": "h = torch.rsqrt(h * h + 1.0)",
    "leaky": "h = F.leaky_relu(h, 0.1)", "tanh": "h = torch.tanh(h) - y"}
Y_LAYOUTS = {  # how y is passed and read: its stored shape from the chain's (rows, cols), and its read
    "full": (lambda r, c: (r, c), "y"), "row": (lambda r, c: (c,), "y"), "column": (lambda r, c: (r, 1), "y"),
    "transposed": (lambda r, c: (c, r), "y.T")}


def chain_source(steps, layout: str, halves: bool, xdtype: str, ydtype: str, rows, cols: int) -> str:
    """The source of `f(x, y)`: the steps in turn, y read as `layout` says, the halves of the last
    axis multiplied (`a * erf(g)`) at the end where `halves`; `rows` a name for a symbolic size."""
    shape, read = Y_LAYOUTS[layout]
    body = [f"    y = {read}", "    h = x"] + ["    " + CHAIN_STEPS[s] for s in steps]
    if halves:
        body += ["    a, g = h.chunk(2, dim=-1)", "    h = a * torch.erf(g)"]
    return (f"import torch\nimport torch.nn.functional as F\nimport babytriton as bt\n\n\n"
            f"def f(x: bt.Tensor({(rows, cols)!r}, {xdtype!r}), y: bt.Tensor({shape(rows, cols)!r}, {ydtype!r})):\n"
            + "\n".join(body) + "\n    return h\n")


def load_chain(tmp_path, source: str):
    import importlib.util
    path = tmp_path / f"chain_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


@st.composite
def chains(draw):
    """(steps, y layout, halves, x dtype, y dtype, rows, cols): 3-4 steps, a clamp first (what
    keeps intermediates), every y layout, half dtypes, ragged and round rows."""
    steps = draw(st.lists(st.sampled_from(sorted(CHAIN_STEPS)), min_size=2, max_size=3)) + ["clamp"]
    steps = [steps[-1]] + steps[:-1]
    xdtype = draw(st.sampled_from(("float32", "float16", "bfloat16")))
    ydtype = draw(st.sampled_from(("float32", xdtype)))
    cols = draw(st.sampled_from((62, 256, 1001, 1024)))
    halves = draw(st.booleans()) and cols % 2 == 0
    return (steps, draw(st.sampled_from(sorted(Y_LAYOUTS))), halves, xdtype, ydtype,
            draw(st.sampled_from((33, 256, 300))), cols)


P2_LIKE = ["gelu", "clamp", "mish", "rsqrt"]         # the fuzzer's p2: x * y at the end
P119_LIKE = ["rsqrt", "log1p", "log1p", "select"]    # p119: float16 x, float32 y


@pytest.mark.parametrize("steps, xdtype, ydtype, vector", [(P2_LIKE + ["erf"], "float32", "float32", "float4"),
                                                          (P119_LIKE, "float16", "float32", "half4")])
def test_a_kept_chain_is_vectors_through_registers_on_sm90(tmp_path, steps, xdtype, ydtype, vector):
    """p2's and p119's chains (Fallback: one scalar a thread, 0.2x torch.compile on an H200): Elementwise,
    4 elements a thread (16 bytes of float32 y), x and y loaded as vectors, the result stored as one."""
    f = load_chain(tmp_path, chain_source(steps, "full", False, xdtype, ydtype, 512, 1024))
    k = bt.jit(target=SM90)(f).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and kernel.launch == "grid 512 x block 256", str(k.fusion)
    assert k.source.count(f"*({vector}*)(x_ptr + ") == 1 and "*(float4*)(y_ptr + " in k.source
    assert_builds_with_nvcc(k)


@pytest.mark.parametrize("xdtype", ["float16", "float32"])
def test_math_read_several_times_is_computed_once_an_element_on_sm90(tmp_path, xdtype):
    """p119's chain: log1p's formula names its argument seven times, and inlined whole the second
    log1p computed the first at each of them (40 logf and 40 divides a thread of 4 elements, 2.75x
    torch.compile's time on an H200). Each log1p is computed once an element: 2 logf, 2 divides."""
    f = load_chain(tmp_path, chain_source(P119_LIKE, "full", False, xdtype, "float32", 512, 1024))
    k = bt.jit(f, cache=False, target=SM90).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and kernel.launch == "grid 512 x block 256", str(k.fusion)
    body = k.source.split('extern "C" __global__')[-1]
    lanes = 4  # 16 bytes of float32 y a thread
    assert body.count("logf(") == 2 * lanes and body.count(" / ") == 2 * lanes, (body.count("logf("),
                                                                                  body.count(" / "))
    assert_builds_with_nvcc(k)


def test_halves_of_a_kept_intermediate_are_computed_per_read_on_sm90(tmp_path):
    """Two clamps and a softplus keep an intermediate that the halves of a split read at two places
    per output element (hypothesis found it on Fallback): Elementwise computes it again at each read."""
    f = load_chain(tmp_path, chain_source(["clamp", "clamp", "softplus"], "column", True, "float32", "float32",
                                          300, 1024))
    k = bt.jit(target=SM90)(f).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise", str(k.fusion)
    assert_builds_with_nvcc(k)


# three NaN-aware clamps and mish, read at both halves: too large to compute at each read, so through
# memory, a launch per block (`Elementwise._launch_per_block`); was Fallback's
@example((["clamp", "clamp", "clamp", "mish"], "full", True, "float32", "float32", 300, 1024))
@example((["clamp", "clamp", "clamp", "mish"], "transposed", True, "float16", "float16", 33, 62))
@settings(max_examples=2, deadline=None, phases=(Phase.explicit, Phase.generate))  # long chains, tens of seconds a compile: not shrunk
@given(chains())
def test_generated_kept_chains_get_elementwise_and_build_for_sm90(tmp_path_factory, chain):
    """Any chain, any y layout (a transposed y: one element a thread), halves, half dtypes: no Fallback."""
    f = load_chain(tmp_path_factory.mktemp("chains"), chain_source(*chain))
    k = bt.jit(target=SM90)(f).compile()
    assert all(kernel.rule != "dlight.gpu.Fallback" for kernel in k.fusion), str(k.fusion)
    assert_builds_with_nvcc(k)


def test_a_chain_too_large_to_compute_at_each_read_is_a_launch_per_block_on_sm90(tmp_path):
    """Kept intermediates read at both halves of a row, each too large to compute again at each
    read: each block a launch of its own (through memory, as Fallback, 256 threads a block)."""
    f = load_chain(tmp_path, chain_source(["clamp", "clamp", "clamp", "mish"], "full", True, "float32", "float32",
                                          300, 1024))
    k = bt.jit(f, cache=False, target=SM90).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and len(kernel.cuda_kernels) > 1, (kernel.rule, kernel.why)
    assert_builds_with_nvcc(k)


@pytest.mark.gpu
@settings(max_examples=8, deadline=None)
@given(chains(), st.sampled_from((None, 1, 5, 1027)), st.integers(0, 1000))
def test_generated_kept_chains_match_torch_on_a_gpu(tmp_path_factory, chain, symbolic, seed):
    """Against torch, NaN and infinities among the inputs; `symbolic`: rows a size known at run time."""
    steps, layout, halves, xdtype, ydtype, rows, cols = chain
    f = load_chain(tmp_path_factory.mktemp("chains"), chain_source(
        steps, layout, halves, xdtype, ydtype, "n" if symbolic else rows, cols))
    rows = symbolic or rows
    x = values((rows, cols), xdtype, seed, "cuda")
    y = values(Y_LAYOUTS[layout][0](rows, cols), ydtype, seed + 1, "cuda")
    got, expected = bt.jit(target="gpu")(f)(x, y), f(x, y)
    if expected.dtype != torch.float32 or x.dtype != torch.float32:  # half inputs: each step rounds
        torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=3e-2, equal_nan=True)
    else:
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4, equal_nan=True)


# -- CPU: a value read several times is computed once -------------------------------------------------
# CPUElementwise inlines a producer into its readers only where that copies no work (inlining.py's
# `shared=False`): a producer read by two blocks, or twice by one (NaN-aware maximum, leaky_relu), stays
# a block, computed per vector of the results inside their one parallel loop (`_per_vector`). Copied,
# p52's chain ran every early step 12 times (4x slower than eager; its bfloat16 form 20x).
MATH_CALLS = ("T.exp(", "T.log(", "T.tanh(", "T.sigmoid(", "T.erf(", "T.rsqrt(", "T.sqrt(")


def kernel_text(stage: str, name: str) -> str:
    """One PrimFunc's text out of a stage's module."""
    start = stage.index(f"def {name}(")
    end = stage.find("\n    @", start)
    return stage[start:end if end > 0 else None]


def math_calls(text: str) -> int:
    # a ragged loop's scalar tail (`with_tails`: blocks and variables named `_tail`) is the same block
    # over the elements left after the whole vectors, not a second computation of any of them
    text = "\n".join(line for line in text.splitlines() if "_tail" not in line)
    return sum(text.count(call) for call in MATH_CALLS)


def assert_each_call_once(k) -> None:
    for kernel in k.fusion:
        if kernel.rule == "CPUElementwise":
            before, after = (kernel_text(k.stages[s], kernel.name) for s in ("FuseTIR", "schedule"))
            assert math_calls(after) <= math_calls(before), (kernel.name, math_calls(before), math_calls(after))


@settings(max_examples=6, deadline=None)
@given(chains(), st.sampled_from((None, 1, 1009)), st.integers(0, 1000))
def test_generated_chains_compute_each_math_call_once_on_the_cpu(tmp_path_factory, chain, symbolic, seed):
    """Any chain, y in every layout, half dtypes, static, symbolic and prime row counts: each math call
    of the fused kernel appears once in its schedule, and the results are torch's (NaN, infinities)."""
    steps, layout, halves, xdtype, ydtype, rows, cols = chain
    # a select on half inputs is a discontinuity: a value that eager rounds to half between two ops
    # (erf(2.3) to 1.0 in bfloat16) and a fused kernel keeps in float32, as torch.compile does, picks
    # the other side of `h > y` (0.76 apart)
    assume(xdtype == "float32" or "select" not in steps)
    f = load_chain(tmp_path_factory.mktemp("chains"), chain_source(
        steps, layout, halves, xdtype, ydtype, "n" if symbolic else rows, cols))
    rows = symbolic or rows
    x = values((rows, cols), xdtype, seed)
    y = values(Y_LAYOUTS[layout][0](rows, cols), ydtype, seed + 1)
    k = bt.jit(target="cpu")(f)
    got, expected = k(x, y), f(x, y)
    assert_each_call_once(k.compile(x, y))
    # in float64 where torch's vectorised float32 gelu gives NaN at +inf on AVX-512 hosts (its erf polynomial)
    exact = f(x.double(), y.double()).float()
    if expected.dtype != torch.float32 or x.dtype != torch.float32:  # half inputs: each step rounds
        expected = torch.where(expected.isnan() & ~exact.isnan(), exact.to(expected.dtype), expected)
        torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=3e-2, equal_nan=True)
    else:
        torch.testing.assert_close(got, exact, atol=1e-5, rtol=1e-4, equal_nan=True)


def p52_chain(x, y, two_results: bool):
    """p52's chain (its early steps read several times by maximum and leaky_relu): two results, or one."""
    h = F.hardswish(x)
    h = F.silu(h)
    h = torch.rsqrt(h * h + 1.0)
    h = torch.maximum(h, y)
    h = F.leaky_relu(h, 0.1)
    if two_results:
        h = F.mish(h)
        return h, h * h
    return F.mish(h) * y


@pytest.mark.parametrize("n, dtype", [(4096 * 33, "float32"), (1009 * 31, "float32"), (2 * 16411, "bfloat16"),
                                      (4096 * 33, "float16")])
def test_a_chain_with_two_results_computes_each_value_once(n, dtype):
    """Each math call once (a loop per kept block, the two results in one), a prime or 2 x odd size too;
    against torch with NaN and infinities. With one result, the kept blocks are computed per vector of
    it (test_a_chain_keeps_its_intermediates_per_vector)."""
    x, y = values((n,), dtype, 0), values((n,), dtype, 1)
    k = bt.jit(target="cpu")(p52_chain)
    for got, expected in zip(k(x, y, True), p52_chain(x, y, True)):
        close(got, expected) if dtype != "float16" else torch.testing.assert_close(
            got.float(), expected.float(), atol=2e-2, rtol=2e-2, equal_nan=True)
    assert_each_call_once(k.compile(x, y, True))


@pytest.mark.parametrize("n, dtype", [(4096 * 33, "float32"), (1 << 16, "bfloat16")])
def test_a_chain_keeps_its_intermediates_per_vector(n, dtype):
    """One result: its kept blocks computed per vector of it, inside its one parallel loop, each
    math call once (an odd size: a loop per block, test_a_chain_with_two_results_computes_each_value_once).
    Against torch with NaN and infinities."""
    x, y = values((n,), dtype, 0), values((n,), dtype, 1)
    k = bt.jit(target="cpu")(p52_chain)
    close(k(x, y, False), p52_chain(x, y, False))
    compiled = k.compile(x, y, False)
    assert_each_call_once(compiled)
    (kernel,) = compiled.fusion
    text = kernel_text(compiled.stages["schedule"], kernel.name)
    # one loop nest at the top (the kept blocks inside it: their buffers compact to a vector's lanes
    # when TVM lowers it), parallel
    top = [line for line in text.splitlines() if line.startswith(" " * 8 + "for ")]
    assert len(top) == 1 and "T.parallel" in top[0], text[:3000]


# -- CPU: odd sizes, rows narrower than the fused vectors, math TVM's vectoriser has no vector form of --
# An odd or symbolic size is whole vectors and a scalar tail (CPUElementwise `_ragged`: LLVM had
# vectorised the loop itself, calling libm's cosf per lane); fused vectors never straddle rows whose
# width a register's lanes divide (a float16 add over rows of 96 loaded and stored lane by lane); and
# erf, log1p, rsqrt, round (nearbyint) and isnan reach TVM's vectoriser in a form it has
# (fast_math.vector_math), which ran a kernel calling one a lane at a time.
def odd_chain(x, y, b):
    h = torch.erf(torch.exp(-x * x) + y) * torch.sigmoid(y)
    return torch.cos(torch.maximum(h, b.reshape(-1, 1)))


def odd_chain_any(x: bt.Tensor((3, "n"), "float32"), y: bt.Tensor((3, "n"), "float32"),
                  b: bt.Tensor((3,), "float32")):
    return odd_chain(x, y, b)


def vector_math_calls(x):
    return (torch.erf(x) + torch.rsqrt(torch.abs(x)) + torch.log1p(torch.abs(x)), torch.round(x),
            torch.isnan(x) | torch.isinf(x), torch.nan_to_num(x, 1.0, 2.0, 3.0))


def float_vector_ops(source: str) -> int:
    return len(re.findall(r"<\d+ x (?:float|half)>", source))


@settings(max_examples=4, deadline=None)
@given(st.integers(4097, 60000), st.integers(0, 1000))
def test_odd_rows_are_vectors_and_a_tail_on_the_cpu(n, seed):
    """Rows of any length (odd, prime): every block vectorised in TIR, the last partial vector of each
    row (or of the fused loop) a scalar tail; results against torch with NaN and infinities."""
    x, y, b = values((3, n), "float32", seed), values((3, n), "float32", seed + 1), values((3,), "float32", seed + 2)
    k = bt.jit(target="cpu")(odd_chain).compile(x, y, b)
    (kernel,) = k.fusion
    assert kernel.rule == "CPUElementwise" and "vector" in kernel.launch, kernel
    if n % 2:
        assert "_tail" in k.stages["schedule"]
    torch.testing.assert_close(k(x, y, b), odd_chain(x, y, b), equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 17, 5003, 50257])
def test_odd_rows_of_symbolic_width_match_torch_on_the_cpu(n):
    x, y, b = values((3, n), "float32", n), values((3, n), "float32", n + 1), values((3,), "float32", 2)
    torch.testing.assert_close(bt.jit(target="cpu")(odd_chain_any)(x, y, b), odd_chain(x, y, b), equal_nan=True,
                               atol=1e-5, rtol=1e-5)


def test_fused_vectors_stay_within_rows_on_the_cpu():
    """A float16 add over rows of 96: vectors of 32 (which divides the row), loads and stores whole;
    fused vectors of 64 were loads and stores of one lane each."""
    x, y = values((50, 64, 96), "float16", 0), values((50, 64, 96), "float16", 1)
    k = bt.jit(target="cpu")(lambda_free_add).compile(x, y)
    (kernel,) = k.fusion
    assert "vector 32" in kernel.launch or "vector 16" in kernel.launch, kernel
    assert "T.Ramp" not in k.stages["schedule"] and "% T.int64(96)" not in k.stages["schedule"]
    torch.testing.assert_close(k(x, y), x + y, equal_nan=True)


def lambda_free_add(x, y):
    return x + y


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [5, 1001])
def test_math_without_a_tvm_vector_form_is_vectorised_and_matches_torch(dtype, n):
    """erf, rsqrt, log1p, round and isnan in vectors (float32 and float16: their LLVM IR has float
    vector arithmetic), results torch's with NaN, infinities, -0.0 and halves' ties."""
    x = values((4, n), dtype, n) * 3
    x[1, :4] = torch.tensor([0.5, -0.5, 2.5, -0.2]).to(x.dtype)
    k = bt.jit(target="cpu")(vector_math_calls).compile(x)
    if dtype != "bfloat16" and n > 64:
        assert float_vector_ops(k.source) > 50, k.source[:2000]
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == "float32" else dict(atol=2e-2, rtol=2e-2)
    for got, expected in zip(k(x), vector_math_calls(x)):
        if got.dtype == torch.bool:
            assert torch.equal(got, expected)
        else:
            torch.testing.assert_close(got, expected, equal_nan=True, **tol)


def test_float16_round_is_torchs_to_the_bit():
    """Every float16 from -1094 to 1094 in steps of 1/64 (ties to even among them), the largest
    halves, -0.0 results and the specials: round's float32 trick gives torch's bits."""
    x = torch.cat([torch.arange(-70000, 70000, dtype=torch.float32) / 64,
                   torch.tensor([65504., -65504., 0.5, -0.5, 1.5, -2.5, -0.2, math.inf, -math.inf])]).half()
    got, expected = bt.jit(target="cpu")(half_round)(x), torch.round(x)
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
    nan = torch.tensor([math.nan], dtype=torch.float16)
    assert bt.jit(target="cpu")(half_round)(nan).isnan().all()


def half_round(x):
    return torch.round(x)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_bool_result_another_block_reads_is_stored_in_place_on_sm90(dtype):
    """A NaN test that is both a result and read by the `where` after it (topk's NaN handling of a
    computed float16): its register copy was stored as an 8-lane bool vector, which CUDA has no type
    for ("Cannot convert type T.boolx8"); a bool result is now read back from memory in place."""
    def f(x: bt.Tensor((8, 1000), dtype)):
        y = x * 2.0 + 1.0
        m = torch.isnan(y)
        return torch.where(m, float("inf"), y), m
    k = bt.jit(f, cache=False, target=SM90).compile()
    assert [kernel.rule for kernel in k.fusion] == ["Elementwise"], str(k.fusion)
    assert_builds_with_nvcc(k)
    x = values((8, 1000), dtype, 0)
    x[0, :7] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, float("nan")])
    for got, expected in zip(bt.jit(cache=False)(f)(x), f(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)
