"""The checks of the exercises: one function per exercise, given the module under test (your
exercises/<name>.py, or the solution chapters/<name>.py), raising if it does not do the job.

Every check compiles small functions with the module's `jit` and compares what they compute with
torch running the same Python body (or saying the same thing in torch). A starter fails its check
at the first gap it reaches: NotImplementedError("exercise ...").
"""
import importlib
import importlib.util
import math
import sys
from pathlib import Path

import torch
import tvm
from tvm import relax
from tvm.relax.op import add, multiply, sigmoid, sqrt, subtract
from tvm.script import tirx as T

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "chapters") not in sys.path:
    sys.path.insert(0, str(ROOT / "chapters"))  # where every chapter and starter finds chapter 13
Tensor = importlib.import_module("13_fusion").Tensor  # the Tensor of every chapter from 09 on


def load(path):
    """Import a chapter, a starter or a solution from its file, under a name of its own (a starter
    and its chapter have the same file name)."""
    path = Path(path).resolve()
    name = f"{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    try:  # MetaSchedule's worker processes get functions by pickle: send this module's by value,
        import cloudpickle  # since a worker cannot import it by the name it has here
        cloudpickle.register_pickle_by_value(module)
    except ImportError:
        pass
    return module


def matches_torch(jitted, *inputs, reference=None):
    """Run the compiled function on `inputs` and the reference (by default its own Python body) on
    the same torch tensors; every result must agree, dtype included."""
    got = jitted(*map(Tensor.of, inputs))
    want = (reference or jitted.fn)(*inputs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    name = jitted.fn.__name__
    assert len(got) == len(want), f"`{name}` returns {len(got)} results, torch {len(want)}"
    for n, (g, w) in enumerate(zip(got, want)):
        w = torch.as_tensor(w)
        assert g.dtype == w.dtype, f"result {n} of `{name}` is {g.dtype}, torch's is {w.dtype}"
        try:
            torch.testing.assert_close(g, w)
        except AssertionError as error:
            raise AssertionError(f"result {n} of `{name}` is not what torch computes: {error}") from None


def refused(compile_it, words):
    """Compiling must fail with a SyntaxError (a located error) whose message contains `words`."""
    try:
        compile_it()
    except SyntaxError as err:
        assert words in err.msg, err.msg
    else:
        raise AssertionError(f"expected a SyntaxError saying {words!r}")


# ---- warm-ups ------------------------------------------------------------------------------------

def check_w1_subtract(m):
    Tensor = m.Tensor

    @m.jit
    def diff(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        c = a - b
        return c - 1.5

    matches_torch(diff, torch.rand(2, 3), torch.rand(2, 3))


def check_w2_negate(m):
    Tensor = m.Tensor

    @m.jit
    def negate(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        c = -a
        return -(c + b)

    matches_torch(negate, torch.randn(2, 3), torch.randn(2, 3))


def check_w3_results(m):
    Tensor = m.Tensor

    @m.jit
    def three(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        s = a + b
        return s, s + a + b, b

    @m.jit
    def one(a: Tensor((2, 3), "float32")):
        return a + a

    matches_torch(three, torch.rand(2, 3), torch.rand(2, 3))
    matches_torch(one, torch.rand(2, 3))


# ---- the tutorial's exercises --------------------------------------------------------------------

def check_14_operators(m):
    """Exercise 1: multiplication, with numbers taking the dtype torch gives the result."""
    Tensor = m.Tensor

    @m.jit
    def products(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32"), h: Tensor((2, 3), "float16"),
                 i: Tensor((2, 3), "int32")):
        return a * b, a * 2.0, h * 2.5, i * 3, i * 1.5, 2 * 3 * a, h * i

    i = torch.tensor([[1, -2, 3], [0, 7, -5]], dtype=torch.int32)
    matches_torch(products, torch.rand(2, 3), torch.rand(2, 3), torch.rand(2, 3).half(), i)


def check_15_meta_schedule(m):
    """Exercise 2: schedule="meta_schedule" tunes the kernel (one measured trial) instead of Dlight."""
    Tensor = m.Tensor

    def matmul_add(a: Tensor((16, 16), "float32"), b: Tensor((16, 16), "float32")):
        return a @ b + 1.0

    tuned = m.jit(matmul_add, schedule="meta_schedule", trials=1)
    a, b = torch.rand(16, 16), torch.rand(16, 16)
    torch.testing.assert_close(tuned(Tensor.of(a), Tensor.of(b)), a @ b + 1.0)
    assert len(tuned.records) == 1, "one trial: one measured candidate"
    plain = tuned.lower(tuned.codegen())
    assert tuned.scheduled["fused_matmul_add"].script() != plain["fused_matmul_add"].script(), \
        "MetaSchedule should have changed the loops of fused_matmul_add"


def check_16_if_else(m):
    """Exercise 3: if/else on a 0-d bool tensor, if without else, names local to one branch."""
    Tensor = m.Tensor

    @m.jit
    def pick(x: Tensor((2, 3), "float32"), y: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        z = x + y
        if flag:
            z = z + x
            w = z + y
        else:
            w = x + 2.0
        return z + w

    @m.jit
    def maybe(x: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        y = x + 1.0
        if flag:
            y = y + y
        return y + x

    x, y = torch.rand(2, 3), torch.rand(2, 3)
    for flag in (torch.tensor(True), torch.tensor(False)):
        matches_torch(pick, x, y, flag)
        matches_torch(maybe, x, flag)

    @m.jit
    def leaks(x: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        if flag:
            only_here = x + x
        return only_here

    refused(leaks.codegen, "only assigned in")


def check_17_for_loops(m):
    """Exercise 4: loops unrolled up to `unroll` iterations, recursive beyond, counts known at run time."""
    Tensor = m.Tensor

    def short(x: Tensor((2, 3), "float32")):
        y = x + 0.0
        for i in range(4):
            y = y + y + x
        return y

    def long(x: Tensor((2, 3), "float32")):
        y = x + 0.0
        for i in range(2, 60, 3):
            y = y + x
        return y

    def counted(x: Tensor((2, 3), "float32"), n: Tensor((), "int64")):
        y = x + 0.0
        for i in range(n):
            y = y + x + x
        return y

    x = torch.rand(2, 3)
    unrolled = m.JIT(short)
    assert [gv.name_hint for gv in unrolled.codegen().get_global_vars()] == ["short"], "4 <= unroll: unrolled"
    matches_torch(unrolled, x)
    matches_torch(m.JIT(short, unroll=0), x)
    recursive = m.JIT(long)
    assert len(recursive.codegen().get_global_vars()) > 1, "20 iterations > unroll: loop functions"
    matches_torch(recursive, x)
    runtime = m.JIT(counted)
    for n in (0, 1, 2, 37):
        matches_torch(runtime, x, torch.tensor(n))


def check_18_library_calls(m):
    """Exercise 5: calls to Relax's operator library, found by name or through a module."""
    Tensor = m.Tensor

    @m.jit
    def swish(x: Tensor((4, 8), "float32")):
        return multiply(x, sigmoid(x))

    @m.jit
    def row_sums(x: Tensor((4, 8), "float32")):
        return relax.op.sum(exp(x), axis=1)  # noqa: F821 - `exp` is found in the library by name

    x = torch.randn(4, 8)
    matches_torch(swish, x, reference=lambda x: x * torch.sigmoid(x))
    matches_torch(row_sums, x, reference=lambda x: torch.exp(x).sum(dim=1))


twice_plus = None  # check_19_tir_calls parses it (a second of TVMScript's parser): its functions call it


def parse_twice_plus():
    @T.prim_func(s_tir=True, private=True)
    def twice_plus(a: T.Buffer((T.int64(4), T.int64(8)), "float32"), b: T.Buffer((T.int64(4), T.int64(8)), "float32"),
                   out: T.Buffer((T.int64(4), T.int64(8)), "float32")):
        for i, j in T.grid(T.int64(4), T.int64(8)):
            with T.sblock("out"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = a[vi, vj] * T.float32(2.0) + b[vi, vj]
    return twice_plus


def check_19_tir_calls(m):
    """Exercise 6: a hand-written PrimFunc called with an output placeholder, and without one."""
    global twice_plus
    if twice_plus is None:
        twice_plus = parse_twice_plus()
    Tensor = m.Tensor

    @m.jit
    def with_placeholder(x: Tensor((4, 8), "float32"), y: Tensor((4, 8), "float32")):
        s = x + y
        placeholder = s
        return twice_plus(x, s, placeholder)

    @m.jit
    def without(x: Tensor((4, 8), "float32"), y: Tensor((4, 8), "float32")):
        return twice_plus(x, y) + y

    x, y = torch.rand(4, 8), torch.rand(4, 8)
    matches_torch(with_placeholder, x, y, reference=lambda x, y: x * 2 + (x + y))
    matches_torch(without, x, y, reference=lambda x, y: x * 2 + y + y)


device = None  # check_20_devices sets it to the module's `device`: `hetero` looks it up here


def hetero(a: Tensor((16, 8), "float32"), b: Tensor((16, 8), "float32")):
    s = a + b
    with device("gpu"):
        t = s + a
        t = t + t
    return t + b


def check_20_devices(m):
    """Exercise 7: `with device("gpu"):` blocks: copies between devices, kernels for each device."""
    global device
    device = m.device
    jitted = m.jit(hetero)
    script = jitted.codegen().script()
    assert script.count("R.to_vdevice(") == 3, "a and s go to the GPU, t comes back"
    kernels = [gv.name_hint for gv in jitted.lower(jitted.codegen()).get_global_vars()]
    assert any(k.endswith("_llvm") for k in kernels) and any(k.endswith("_cuda") for k in kernels), kernels
    sources = jitted.sources()  # builds one executable holding both
    assert "__global__" in sources["cuda"] and sources["llvm"]
    if m.ch11.has_gpu():
        a, b = torch.rand(16, 8), torch.rand(16, 8)
        t = a + b + a
        torch.testing.assert_close(jitted(m.Tensor.of(a), m.Tensor.of(b)), t + t + b)


def check_21_tir_backend(m):
    """Exercise 8: backend="tir": loops, subscripts and scalar locals straight to one PrimFunc."""
    Tensor = m.Tensor

    @m.jit(backend="tir")
    def matmul(p: Tensor((3, 4), "float32"), q: Tensor((4, 2), "float32"), r: Tensor((3, 2), "float32")):
        for i in range(3):
            for j in range(2):
                acc = 0.0
                for k in range(4):
                    acc += p[i, k] * q[k, j]
                r[i, j] = acc

    @m.jit(backend="tir")
    def scaled_exp(x: Tensor((5,), "float32"), y: Tensor((5,), "float32")):
        for i in range(5):
            y[i] = math.exp(x[i] - 1.0) * 2.0

    p, q = torch.rand(3, 4), torch.rand(4, 2)
    torch.testing.assert_close(matmul(Tensor.of(p), Tensor.of(q), Tensor.of(torch.empty(3, 2))), p @ q)
    x = torch.randn(5)
    torch.testing.assert_close(scaled_exp(Tensor.of(x), Tensor.of(torch.empty(5))), torch.exp(x - 1.0) * 2.0)
    assert [type(f).__name__ for f in matmul.codegen().functions.values()] == ["PrimFunc"]


# ---- after the tutorial: the course's own -------------------------------------------------------

def check_22_autodiff(m):
    """Exercise 9: the VJP function, the reverse-mode walk by hand and the Gradient pass's backward, each
    compiled and compared with torch.autograd (broadcast parameters, a value used twice, a constant)."""
    Tensor = m.Tensor

    @m.jit
    def gate(x: Tensor((3, 5), "float32"), w: Tensor((5,), "float32"), b: Tensor((3, 1), "float32")):
        h = add(multiply(x, w), b)
        return multiply(sigmoid(h), add(x, 2.0))

    def gate_torch(x, w, b):
        return torch.sigmoid(x * w + b) * (x + 2.0)

    x, w, b, dy = torch.randn(3, 5), torch.randn(5), torch.randn(3, 1), torch.randn(3, 5)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    gate_torch(*leaves).backward(dy)
    expected = [t.grad for t in leaves]

    vjp = m.vjp_function(gate.codegen(), "gate")["gate_vjp"]
    assert [p.name for p in vjp.params] == ["x", "w", "b", "dy"], "the VJP function takes the parameters, then dy"
    assert len(vjp.body.blocks) == 1 and isinstance(vjp.body.blocks[0], relax.DataflowBlock), \
        "one dataflow block, the forward's bindings inlined (Gradient differentiates exactly one)"
    data = [tvm.runtime.from_dlpack(t) for t in (x, w, b, dy)]
    scalar = relax.VirtualMachine(tvm.compile(tvm.IRModule({"gate_vjp": vjp}), "llvm"), tvm.cpu())
    torch.testing.assert_close(torch.from_dlpack(scalar["gate_vjp"](*data)), (gate_torch(x, w, b) * dy).sum())

    mod = m.vjp_function(gate.codegen(), "gate")
    ours = relax.VirtualMachine(tvm.compile(m.reverse_mode(mod, "gate_vjp", wrt=("x", "w", "b")), "llvm"), tvm.cpu())
    got = [torch.from_dlpack(g) for g in ours["gate_vjp_grad"](*data)]
    for name, g, want in zip("xwb", got, expected):
        assert g.shape == want.shape, \
            f"the adjoint of {name} has {name}'s shape {tuple(want.shape)}, not {tuple(g.shape)}"
        torch.testing.assert_close(g, want)

    torch.testing.assert_close(gate.backward(("w", "b"), *map(Tensor.of, (x, w, b)), dy=Tensor.of(dy)), expected[1:])

    @m.jit
    def layernorm(x: Tensor((4, 16), "float32"), w: Tensor((16,), "float32")):
        d = subtract(x, relax.op.mean(x, axis=1, keepdims=True))
        v = relax.op.mean(multiply(d, d), axis=1, keepdims=True)
        return multiply(divide(d, sqrt(add(v, 1e-5))), w)  # noqa: F821 - `divide` is found in the library by name

    x, w, dy = torch.randn(4, 16), torch.randn(16), torch.randn(4, 16)
    leaves = [t.clone().requires_grad_() for t in (x, w)]
    (torch.nn.functional.layer_norm(leaves[0], (16,), eps=1e-5) * leaves[1]).backward(dy)
    got = layernorm.backward(("x", "w"), Tensor.of(x), Tensor.of(w), dy=Tensor.of(dy))
    torch.testing.assert_close(got, [t.grad for t in leaves])


def check_23_torch_names(m):
    """Exercise 10: torch's functions and tensor methods compile to Relax's operators by the table's
    rules (renamed arguments, computed axes, one name as two operators), compared with torch."""
    Tensor = m.Tensor

    @m.jit
    def scores(q: Tensor((4, 8), "float32"), k: Tensor((6, 8), "float32")):
        return torch.softmax(torch.matmul(q, k.transpose(0, 1)), dim=-1)

    @m.jit
    def row_max(x: Tensor((4, 8), "float32")):
        return x.max(dim=1)

    @m.jit
    def exp_sums(x: Tensor((3, 5, 8), "float32")):
        return x.exp().mean(dim=2, keepdim=True)

    q, k, x, x3 = torch.randn(4, 8), torch.randn(6, 8), torch.randn(4, 8), torch.randn(3, 5, 8)
    text = scores.codegen().script()
    assert "R.permute_dims(k, axes=[1, 0])" in text, "transpose(0, 1) is permute_dims with the two axes swapped"
    assert "axis=-1" in text, "torch's dim= is Relax's axis="
    torch.testing.assert_close(scores(Tensor.of(q), Tensor.of(k)), torch.softmax(q @ k.T, dim=-1))
    values, indices = (torch.from_dlpack(t) for t in row_max(Tensor.of(x)))
    torch.testing.assert_close((values, indices), tuple(x.max(dim=1)))
    torch.testing.assert_close(exp_sums(Tensor.of(x3)), x3.exp().mean(dim=2, keepdim=True))


def check_24_programs(m):
    """Exercise 11: a block kernel (program_id, arange, masked load and store) launched over a grid, run at
    ragged sizes against torch, one compilation for every size, the grid a parallel loop of programs."""
    @m.jit
    def shifted_relu(x, out, n, shift, BLOCK: m.constexpr):
        offs = m.program_id(0) * BLOCK + m.arange(0, BLOCK)
        mask = offs < n
        v = m.load(x + offs, mask=mask, other=-1.0) - shift
        m.store(out + offs, v * (v > 0.0), mask=mask)

    for n in (1, 100, 257):
        x, out = torch.randn(n), torch.full((n + 3,), 5.0)
        shifted_relu[(m.cdiv(n, 64),)](x, out, n, 0.25, BLOCK=64)
        torch.testing.assert_close(out[:n], torch.relu(x - 0.25))
        assert (out[n:] == 5.0).all(), "the mask must keep the store inside n"
    assert len(shifted_relu.compiled) == 1, "one compilation for every size: sizes and the grid are parameters"
    text = shifted_relu.codegen(x, out, 257, 0.25, BLOCK=64).script()
    assert "T.parallel(grid0)" in text, "the programs of the grid are one parallel loop"


def check_25_block_reductions(m):
    """Exercise 12: 2-D blocks by broadcasting (`[:, None]`, `[None, :]`) and reductions inside a block:
    a row softmax and column sums at ragged sizes against torch, and on a GPU (built, not run) a
    cross-thread reduction through shared memory."""
    @m.jit
    def softmax(x, out, n_cols, BLOCK: m.constexpr):
        cols = m.arange(0, BLOCK)
        v = m.load(x + m.program_id(0) * n_cols + cols, mask=cols < n_cols, other=-math.inf)
        num = m.exp(v - m.block_max(v, axis=0))
        m.store(out + m.program_id(0) * n_cols + cols, num / m.block_sum(num, axis=0), mask=cols < n_cols)

    @m.jit
    def column_sums(x, out, n_rows, n_cols, BLOCK_R: m.constexpr, BLOCK_C: m.constexpr):
        rows = m.arange(0, BLOCK_R)
        cols = m.program_id(0) * BLOCK_C + m.arange(0, BLOCK_C)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        v = m.load(x + rows[:, None] * n_cols + cols[None, :], mask=mask)
        m.store(out + cols, m.block_sum(v, axis=0), mask=cols < n_cols)

    x, out = torch.randn(19, 50) * 3, torch.empty(19, 50)
    softmax[(19,)](x, out, 50, BLOCK=64)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    y, sums = torch.randn(13, 21), torch.empty(21)
    column_sums[(m.cdiv(21, 8),)](y, sums, 13, 21, BLOCK_R=16, BLOCK_C=8)
    torch.testing.assert_close(sums, y.sum(dim=0))
    cuda = tvm.compile(softmax.codegen(x, out, 50, BLOCK=64, gpu=True),
                       target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    source = cuda.mod.imports[0].inspect_source()
    assert "__shared__" in source and "__syncthreads()" in source, \
        "on a GPU the kept block is in shared memory, and each step of the tree ends on a barrier"


def check_26_dot_tiles(m):
    """Exercise 13: a tiled matmul, a K loop carrying a float32 accumulator and `dot` of two tiles, at
    ragged sizes against torch (float32, and float16 inputs accumulated in float32)."""
    @m.jit
    def matmul(a, b, c, M, N, K, BLOCK_M: m.constexpr, BLOCK_N: m.constexpr, BLOCK_K: m.constexpr):
        rows = m.program_id(0) * BLOCK_M + m.arange(0, BLOCK_M)
        cols = m.program_id(1) * BLOCK_N + m.arange(0, BLOCK_N)
        acc = m.zeros((BLOCK_M, BLOCK_N))
        for k in range(0, m.cdiv(K, BLOCK_K)):
            ks = k * BLOCK_K + m.arange(0, BLOCK_K)
            a_tile = m.load(a + rows[:, None] * K + ks[None, :], mask=(rows < M)[:, None] & (ks < K)[None, :])
            b_tile = m.load(b + ks[:, None] * N + cols[None, :], mask=(ks < K)[:, None] & (cols < N)[None, :])
            acc += m.dot(a_tile, b_tile)
        m.store(c + rows[:, None] * N + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < N)[None, :])

    for dtype, (M, N, K) in ((torch.float32, (33, 17, 45)), (torch.float16, (20, 30, 9))):
        a, b, c = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype), torch.empty(M, N, dtype=dtype)
        matmul[(m.cdiv(M, 16), m.cdiv(N, 8))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=8, BLOCK_K=8)
        torch.testing.assert_close(c, (a.float() @ b.float()).to(dtype))


def check_27_autotune(m):
    """Exercise 14: a grid-stride loop (a fixed grid covering any size) and an autotuner that times each
    config once per key and launches the fastest, compared with torch."""
    @m.jit
    def negate(x, out, n, BLOCK: m.constexpr):
        for start in range(m.program_id(0) * BLOCK, n, m.num_programs(0) * BLOCK):
            offs = start + m.arange(0, BLOCK)
            m.store(out + offs, 0.0 - m.load(x + offs, mask=offs < n), mask=offs < n)

    for n, programs in ((1000, 3), (7, 5), (129, 1)):
        x, out = torch.randn(n), torch.full((n + 2,), 9.0)
        negate[(programs,)](x, out, n, BLOCK=32)
        torch.testing.assert_close(out[:n], -x)
        assert (out[n:] == 9.0).all(), "the mask must keep the store inside n"

    configs = [{"BLOCK": 32}, {"BLOCK": 128}]
    tuned = m.autotune(configs=configs, key=["n"])(m.jit(negate.fn))
    for n in (300, 300, 50):
        x, out = torch.randn(n), torch.empty(n)
        tuned[lambda meta: (m.cdiv(n, meta["BLOCK"]),)](x, out, n)
        torch.testing.assert_close(out, -x)
    assert sorted(tuned.timings) == [(50,), (300,)], "one timing per value of the key, none for a key seen before"
    assert all(sorted(t) == [0, 1] for t in tuned.timings.values()), "every config timed"
    assert tuned.best[(300,)] in configs and len(tuned.kernel.compiled) == 2, "each config compiled once"


# exercise file stem -> its check; `pytest exercises -k <stem or part of it>` runs one
CHECKS = {name.removeprefix("check_"): fn for name, fn in list(globals().items()) if name.startswith("check_")}

# exercise file stem -> (its pytest marker, what it asks)
TASKS = {
    "w1_subtract": ("warmup", "warm-up 1, subtraction"), "w2_negate": ("warmup", "warm-up 2, a unary operator"),
    "w3_results": ("warmup", "warm-up 3, several results"),
    "14_operators": ("task1", "multiplication and the other operators"),
    "15_meta_schedule": ("task2", "MetaSchedule instead of Dlight"), "16_if_else": ("task3", "if/else"),
    "17_for_loops": ("task4", "for loops"), "18_library_calls": ("task5", "calling Relax's library"),
    "19_tir_calls": ("task6", "calling your own TensorIR"), "20_devices": ("task7", "CPU and GPU in one function"),
    "21_tir_backend": ("task8", "a TensorIR code generator"),
    "22_autodiff": ("task9", "reverse-mode differentiation"),
    "23_torch_names": ("task10", "torch's names on Relax's operators"),
    "24_programs": ("task11", "a grid of programs: a block kernel as one TIR PrimFunc"),
    "25_block_reductions": ("task12", "2-D blocks and reductions inside a block"),
    "26_dot_tiles": ("task13", "tiles: dot, a K loop and an accumulator"),
    "27_autotune": ("task14", "the grid-stride loop and autotuning"),
}

# where each exercise's reference solution is
SOLUTIONS = {stem: ROOT / ("exercises/solutions" if stem.startswith("w") else "chapters") / f"{stem}.py"
             for stem in CHECKS}
