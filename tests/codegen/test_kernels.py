"""User TensorIR kernels called from @jit code: outputs inferred from the signature, placeholders,
fusion with neighbouring ops (int32 sizes included), symbolic sizes, the GPU build, and errors."""
import inspect
import re

import pytest
import torch
import tvm
from tvm.script import tirx as T

import babytriton as bt

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError", "relax.")


# The tutorial's spelling: plain int sizes (int32), an elementwise op_pattern.
@T.prim_func(s_tir=True)
def custom_add(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    T.func_attr({"tir.noalias": True, "op_pattern": 0})
    for i, j in T.grid(4, 8):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] + B[vi, vj] * T.float32(2)


# No op_pattern: AnnotateTIROpPattern infers it.
@T.prim_func(s_tir=True)
def scale(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float32(3)


# Injective (op_pattern 2): each output element reads one input element, elsewhere.
@T.prim_func(s_tir=True)
def flip_rows(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    T.func_attr({"op_pattern": 2})
    for i, j in T.grid(4, 8):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[3 - vi, vj]


@T.prim_func(s_tir=True)
def double_rows(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(8)), "float32")
    C = T.match_buffer(c, (n, T.int64(8)), "float32")
    for i, j in T.grid(n, T.int64(8)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float32(2)


# The output's size m is not known from the input: the call passes a placeholder.
@T.prim_func(s_tir=True)
def repeat_first(a: T.handle, c: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in range(m):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[T.int64(0)]


@T.prim_func(s_tir=True)
def split_signs(A: T.Buffer((6,), "float32"), P: T.Buffer((6,), "float32"), N: T.Buffer((6,), "float32")):
    for i in range(6):
        with T.sblock("P"):
            vi = T.axis.remap("S", [i])
            P[vi] = T.max(A[vi], T.float32(0))
        with T.sblock("N"):
            vi = T.axis.remap("S", [i])
            N[vi] = T.min(A[vi], T.float32(0))


@T.prim_func(s_tir=True)
def row_sums(A: T.Buffer((4, 8), "float32"), S: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.sblock("S"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(0)
            S[vi] = S[vi] + A[vi, vk]


# Plain loops, no blocks: runs on the CPU as its own kernel.
@T.prim_func
def plus_one(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        C[i, j] = A[i, j] + T.float32(1)


# Scheduled by hand for the GPU: Dlight leaves it alone.
@T.prim_func
def bound_triple(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    for i in T.thread_binding(4, thread="blockIdx.x"):
        for j in T.thread_binding(8, thread="threadIdx.x"):
            C[i, j] = A[i, j] * T.float32(3)


@T.prim_func
def with_scalar(A: T.Buffer((4,), "float32"), alpha: T.float32, C: T.Buffer((4,), "float32")):
    for i in range(4):
        C[i] = A[i] * alpha


@T.prim_func(s_tir=True)
def int32_rows(a: T.handle, c: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi]


X48 = bt.Tensor((4, 8), "float32")
OUT = bt.Tensor((4, 8), "float32")


@bt.jit
def custom_add_twice(x: X48, s: X48):
    """A @jit function over a kernel, also called from another module (tests/codegen/test_inline.py)."""
    return custom_add(custom_add(x, s), s)


def ref_add(a, b):
    return a + b * 2


def rand(*shape):
    return torch.randn(*shape)


def functions(kernel: bt.Kernel, stage: str = "FuseTIR") -> list[str]:
    return sorted(re.findall(r"def (\w+)\(", kernel.stages[stage]))


def test_outputs_come_from_the_signature_and_fuse_with_neighbours():
    @bt.jit
    def f(x: X48, s: X48):
        out = custom_add(exp(x), s)
        return sigmoid(out)

    x, s = rand(4, 8), rand(4, 8)
    torch.testing.assert_close(f(x, s), torch.sigmoid(ref_add(torch.exp(x), s)))
    k = f.compile(x, s)
    # one fused kernel holds the custom kernel and both neighbours; the original is gone
    assert functions(k) == ["f", "fused_tir_exp_custom_add_tir_sigmoid"]
    assert "R.call_tir(cls.custom_add" in k.stages["relax"]


def test_placeholder_forms():
    @bt.jit
    def f(x: X48, s: X48, like: X48):
        a = custom_add(x, s, like)                              # a tensor's type
        b = custom_add(a, s, OUT)                               # a bt.Tensor from the globals
        return custom_add(b, s, bt.Tensor((4, 8), "float32"))   # one written in place

    x, s = rand(4, 8), rand(4, 8)
    torch.testing.assert_close(f(x, s, torch.empty(4, 8)), ref_add(ref_add(ref_add(x, s), s), s))


def test_inferred_op_pattern_fuses_too():
    @bt.jit
    def f(x: X48):
        return scale(x + 1.0) * 2.0

    x = rand(4, 8)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    assert functions(f.compile(x)) == ["f", "fused_add_scale_multiply"]


def test_injective_kernel_fuses():
    @bt.jit
    def f(x: X48):
        return exp(flip_rows(x * 2.0))

    x = rand(4, 8)
    torch.testing.assert_close(f(x), torch.exp(x.flip(0) * 2))
    assert functions(f.compile(x)) == ["f", "fused_multiply_flip_rows_tir_exp"]


def test_symbolic_kernel_from_symbolic_and_static_callers():
    @bt.jit
    def f(x: bt.Tensor(("m", 8), "float32")):
        return double_rows(x) + 1.0

    @bt.jit
    def g(x: bt.Tensor((3, 8), "float32")):
        return double_rows(x) + double_rows(exp(x))

    for m in (1, 5):
        x = rand(m, 8)
        torch.testing.assert_close(f(x), x * 2 + 1)
    assert functions(f.compile(rand(2, 8))) == ["f", "fused_double_rows_add"]
    x = rand(3, 8)
    torch.testing.assert_close(g(x), x * 2 + torch.exp(x) * 2)
    assert functions(g.compile(x)) == ["fused_double_rows_tir_exp_double_rows_add", "g"]


def test_a_placeholder_gives_sizes_the_inputs_cannot():
    @bt.jit
    def f(x: bt.Tensor(("n",), "float32")):
        return repeat_first(x, bt.Tensor((5,), "float32")) + 1.0

    x = rand(3)
    torch.testing.assert_close(f(x), x[0].expand(5) + 1)


def test_two_outputs_and_a_reduction():
    @bt.jit
    def f(x: bt.Tensor((6,), "float32"), y: X48):
        pos, neg = split_signs(x)
        return pos - neg, row_sums(y)

    x, y = rand(6), rand(4, 8)
    d, s = f(x, y)
    torch.testing.assert_close(d, x.abs())
    torch.testing.assert_close(s, y.sum(1))


def test_plain_loop_kernel_runs_unfused_on_cpu():
    @bt.jit
    def f(x: X48):
        return exp(plus_one(x))

    x = rand(4, 8)
    torch.testing.assert_close(f(x), torch.exp(x + 1))
    assert "plus_one" in functions(f.compile(x))


def test_same_kernel_twice_is_declared_once():
    @bt.jit
    def f(x: X48, s: X48):
        return custom_add(custom_add(x, s), s)

    x, s = rand(4, 8), rand(4, 8)
    torch.testing.assert_close(f(x, s), ref_add(ref_add(x, s), s))
    assert f.compile(x, s).stages["relax"].count("def custom_add") == 1


def test_cuda_codegen_fuses_the_custom_kernel():
    @bt.jit(target=SM90)
    def f(x: X48, s: X48):
        return sigmoid(custom_add(exp(x), s))

    k = f.compile()
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)", k.source))
    assert kernels == {"fused_tir_exp_custom_add_tir_sigmoid_kernel"}
    assert "threadIdx.x" in k.source and "tirx.is_scheduled" in k.stages["schedule"]


def test_cuda_codegen_keeps_a_hand_scheduled_kernel():
    @bt.jit(target=SM90)
    def f(x: X48):
        return exp(bound_triple(x))

    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)", f.compile().source))
    assert kernels == {"bound_triple_kernel", "tir_exp_kernel"}


@pytest.mark.gpu
def test_custom_kernel_on_the_gpu():
    @bt.jit(target="gpu")
    def f(x: X48, s: X48):
        return sigmoid(custom_add(exp(x), s)) + double_rows(x)

    @bt.jit(target="gpu")
    def g(x: bt.Tensor(("m", 8), "float32")):
        return double_rows(x) * 3.0

    x, s = rand(4, 8).cuda(), rand(4, 8).cuda()
    out = f(x, s)
    assert out.is_cuda
    torch.testing.assert_close(out, torch.sigmoid(ref_add(torch.exp(x), s)) + x * 2)
    for m in (1, 300):
        y = rand(m, 8).cuda()
        torch.testing.assert_close(g(y), y * 6)
    h = bt.jit(target="gpu")(lambda_free_bound)
    torch.testing.assert_close(h(x), torch.exp(x * 3))


def lambda_free_bound(x: X48):
    return exp(bound_triple(x))


# -- errors -------------------------------------------------------------------------------------
def kernel_error(fn, *args) -> bt.CompilationError:
    with pytest.raises(bt.CompilationError) as info:
        bt.jit(fn)(*args)
    err = info.value
    text = str(err).replace(err.source_line or "", "")
    for word in INTERNALS:
        assert word not in text, (word, text)
    lines, start = inspect.getsourcelines(fn)
    assert err.lineno == start + next(i for i, line in enumerate(lines) if "# error" in line)
    return err


def too_few(x):
    return custom_add(x)  # error


def too_many(x):
    return custom_add(x, x, x, x)  # error


def wrong_dtype(x):
    return custom_add(x, x.astype("float16"))  # error


def wrong_shape(x):
    return custom_add(x, x.reshape(8, 4))  # error


def not_a_tensor(x):
    return custom_add(x, 2.0)  # error


def bad_placeholder(x):
    return custom_add(x, x, bt.Tensor((4, 4), "float32"))  # error


def keywords(x):
    return custom_add(x, B=x)  # error


def scalar_param(x):
    return with_scalar(x)  # error


def unknown_output_size(x):
    return repeat_first(x)  # error


def static_kernel_symbolic_call(x: bt.Tensor(("n", 8), "float32")):
    return scale(x)  # error


def int32_size_symbolic_call(x: bt.Tensor(("n",), "float32")):
    return int32_rows(x)  # error


@pytest.mark.parametrize("fn, arg, words", [
    (too_few, (4, 8), "buffer 'B' would be an output, but the kernel never writes it"),
    (too_many, (4, 8), "kernel `custom_add` has 3 buffers (A, B, C), got 4 arguments"),
    (wrong_dtype, (4, 8), "buffer 'B' is float32 (4, 8), but argument 2 is a float16 tensor of shape (4, 8)"),
    (wrong_shape, (4, 8), "but argument 2 has size 8 on axis 0"),
    (not_a_tensor, (4, 8), "argument 2 of kernel `custom_add` (buffer 'B') must be a tensor"),
    (bad_placeholder, (4, 8), "buffer 'C' is float32 (4, 8), but the placeholder has size 4 on axis 1"),
    (keywords, (4, 8), "takes its buffers positionally"),
    (scalar_param, (4,), "scalar parameter 'alpha'"),
    (static_kernel_symbolic_call, (3, 8), "has size n on axis 0"),
    (unknown_output_size, (3,), "cannot infer the size 'm' of kernel `repeat_first`'s output 'C'"),
    (int32_size_symbolic_call, (3,), "declare it with T.int64()"),
])
def test_kernel_call_errors(fn, arg, words):
    err = kernel_error(fn, rand(*arg))
    assert words in err.message, err.message


def test_plain_loops_are_refused_for_the_gpu():
    def f(x: X48):
        return exp(plus_one(x))  # error

    with pytest.raises(bt.CompilationError) as info:
        bt.jit(target=SM90)(f).compile()
    assert "plain loops" in info.value.message and "T.sblock" in info.value.message
