"""Eager reference mode: `f.eager(...)` and BABYTRITON_INTERPRET=1 run the function's own Python on
torch and give what the compiled call gives (dtypes, shapes, values); every library op of the eager
table against its compiled self; kernels, nested @jit calls, the TIR backend, print and breakpoint."""
import inspect
import sys
import traceback

import numpy as np
import pytest
import torch
from tvm import relax
from tvm.relax.op import exp as relax_exp
from tvm.script import relax as R
from tvm.script import tirx as T

import babytriton as bt
from babytriton.eager import reference as eager
from babytriton.codegen import kernels, library, semantic, values
from babytriton.core.errors import Diagnostic


def same(got, want):
    """Compiled and eager results agree: structure, dtypes, shapes, values."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    if want is None:
        assert got is None
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype
        got, want = torch.from_numpy(got), torch.from_numpy(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(got.dtype)
    torch.testing.assert_close(got, want, equal_nan=True, atol=tol, rtol=tol)


def both(fn, *args):
    """The compiled and the eager result of one call (arguments copied for each)."""
    copy = lambda: [a.clone() if isinstance(a, torch.Tensor) else a for a in args]  # noqa: E731
    compiled = fn(*copy())
    eagerly = fn.eager(*copy())
    same(eagerly, compiled)
    return compiled


def rand(*shape, dtype=torch.float32, low=-2, high=2):
    return (torch.rand(*shape) * (high - low) + low).to(dtype)


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


# -- the op table: each entry against the compiled op --------------------------------------------
X, I, B = rand(2, 3), torch.randint(-3, 4, (2, 3), dtype=torch.int32), rand(2, 3) > 0
P = rand(2, 3, low=0.5, high=2)  # positive
CASES = {
    # unary, float
    **{name: (f"{name}(x)", (X,)) for name in (
        "abs", "exp", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "sign", "negative",
        "square", "isnan", "isinf", "isfinite", "trunc", "relu", "relu6", "silu", "selu", "gelu", "gelu_tanh",
        "flatten", "batch_flatten", "atan", "asinh", "sinh", "cosh")},
    **{name: (f"{name}(x)", (P,)) for name in ("log", "sqrt", "rsqrt", "acosh")},
    **{name: (f"{name}(x * 0.4)", (X,)) for name in ("asin", "acos", "atanh")},
    "abs_int": ("abs(x)", (I,)), "negative_int": ("negative(x)", (I,)), "sign_bool": ("sign(x)", (B,)),
    "bitwise_not": ("bitwise_not(x)", (I,)), "logical_not": ("logical_not(x)", (I,)),
    # binary (and promotion, numbers taking the tensor's dtype)
    **{name: (f"{name}(x, y)", (X, P)) for name in (
        "add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "mod", "power", "maximum", "minimum",
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "atan2", "log_add_exp")},
    **{f"{name}_int": (f"{name}(x, y)", (I, I.abs() + 1)) for name in (
        "divide", "floor_divide", "floor_mod", "mod", "maximum", "bitwise_and", "bitwise_or", "bitwise_xor",
        "left_shift", "right_shift")},
    "logical_and": ("logical_and(x, y)", (I, B)), "logical_or": ("logical_or(x, y)", (X, B)), "logical_xor": ("logical_xor(x, y)", (B, B)),
    "maximum_bool": ("maximum(x, y)", (B, B)), "add_number": ("add(x, 2)", (I,)),
    "multiply_mixed": ("multiply(x, y)", (X.half(), I)), "outer": ("outer(x.reshape(6), y.reshape(6))", (X, P)),
    "where": ("where(x > 0, x, y)", (X, I)),
    "where_numbers": ("where(x > 0, 1, 2.5)", (X,)), "clip": ("clip(x, -1, 1.5)", (X,)),
    "clip_int": ("clip(x, -1, 2)", (I,)),
    # reductions
    **{f"{name}_{axis}": (f"{name}(x, axis={axis})", (X,)) for name in (
        "sum", "mean", "max", "min", "prod", "argmax", "argmin", "std", "variance") for axis in ("None", "1")},
    "sum_keep": ("sum(x, axis=(0, 1), keepdims=True)", (X,)), "sum_int8": ("sum(x)", (I.to(torch.int8),)),
    "prod_bool": ("prod(x, axis=0)", (B,)), "max_bool": ("max(x, axis=1)", (B,)),
    "argmax_keep": ("argmax(x, keepdims=True)", (X,)), "cumsum": ("cumsum(x, axis=1)", (X,)),
    "cumsum_flat": ("cumsum(x)", (I,)), "cumsum_exclusive": ("cumsum(x, axis=0, exclusive=True)", (I,)),
    "cumprod": ("cumprod(x, axis=1)", (X,)), "cumsum_dtype": ("cumsum(x, axis=1, dtype='float64')", (I,)),
    # neural-network
    "softmax": ("softmax(x)", (X,)), "softmax_axis": ("softmax(x, axis=0)", (X,)),
    "log_softmax": ("log_softmax(x, axis=1)", (X,)), "leakyrelu": ("leakyrelu(x, 0.2)", (X,)),
    "softplus": ("softplus(x)", (X,)),
    "layer_norm": ("layer_norm(x, y.sum(axis=0), y.sum(axis=0) * 0.5, -1)", (X, P)),
    "layer_norm_2": ("layer_norm(x, y, y * 0.5, (0, 1))", (X, P)),
    "rms_norm": ("rms_norm(x, y.sum(axis=0))", (X, P)),
    # linear algebra and shapes
    "matmul": ("matmul(x, permute_dims(y))", (X, P)), "matmul_out": ("matmul(x, permute_dims(y), 'float64')", (X, P)),
    "matmul_half": ("matmul(x, permute_dims(y))", (X.half(), P.half())),
    "linear": ("linear(x, y)", (X, P)), "reshape": ("reshape(x, (3, -1))", (X,)),
    "permute_dims": ("permute_dims(x, (1, 0))", (X,)), "concat": ("concat((x, y), axis=1)", (X, P)),
    "stack": ("stack((x, y), axis=2)", (X, P)), "squeeze": ("squeeze(x)", (X.reshape(1, 2, 1, 3),)),
    "squeeze_axis": ("squeeze(x, axis=[2])", (X.reshape(1, 2, 1, 3),)),
    "expand_dims": ("expand_dims(x, (0, -1))", (X,)), "broadcast_to": ("broadcast_to(x, (4, 2, 3))", (X,)),
    "astype": ("astype(x, 'int32')", (X * 3,)), "astype_bool": ("astype(x, torch.bool)", (X,)),
    "tril": ("tril(x, 1)", (X,)), "triu": ("triu(x)", (X,)), "tile": ("tile(x, (2, 1))", (X,)),
    "flip": ("flip(x, 1)", (X,)), "flip_negative": ("flip(x, axis=-2)", (X,)),
    "bucketize": ("bucketize(x, y)", (X, torch.tensor([-1.0, 0.0, 1.0]))),
    "bucketize_right": ("bucketize(x, y, True, True)", (I, torch.tensor([-1, 0, 2], dtype=torch.int32))),
    "conv2d": ("conv2d(x.reshape(1, 2, 1, 3), y.reshape(3, 2, 1, 1), strides=(1, 2), padding=(1, 0, 0, 1))",
               (X, P)),
    "repeat": ("repeat(x, 2, axis=1)", (X,)), "take": ("take(x, y, axis=1)", (X, torch.tensor([2, 0]))),
    "take_flat": ("take(x, y)", (X.reshape(6), torch.tensor([[5, 0], [1, 1]]))),
    "take_int": ("take(x, 1, axis=0)", (X,)),
    "strided_slice": ("strided_slice(x, axes=[1, 0], begin=[2, 0], end=[0, 2], strides=[-1, 1])", (X,)),
    "gather_elements": ("gather_elements(x, y, axis=1)", (X, torch.tensor([[0, 2, 1], [1, 1, 0]]))),
    "scatter_elements": ("scatter_elements(x, y, x * 2, axis=1)", (X, torch.tensor([[0, 2, 1], [1, 2, 0]]))),
    "sort": ("sort(x, axis=1, descending=True)", (X,)), "argsort": ("argsort(x, axis=0)", (X,)),
    "topk": ("topk(x, 2, axis=1)", (X,)), "split": ("split(x, 3, axis=1)", (X,)),
    "collapse_sum_to": ("collapse_sum_to(x, (1, 3))", (X,)),
    "collapse_sum_like": ("collapse_sum_like(x, y)", (X, torch.ones(3))), "masked_fill": ("masked_fill(x, x > 0, y)",
                                                                                (X, torch.tensor(0.5))),
    # creation
    "zeros": ("zeros((2, 3), 'float16') + x", (X.half(),)), "ones": ("ones((3,), torch.int32)", (X,)),
    "full": ("full((2,), 3) + full((2,), 2.5)", (X,)), "full_like": ("full_like(x, 2.5)", (I,)),
    "zeros_like": ("zeros_like(x, 'float64')", (I,)), "ones_like": ("ones_like(x)", (B,)),
    "eye": ("eye(3, 2, 1)", (X,)), "eye_like": ("eye_like(x, -1)", (X,)), "arange": ("arange(1, 7, 2)", (X,)),
}


def _function(expression: str, nargs: int):
    names = ["x", "y", "z"][:nargs]
    source = f"def f({', '.join(names)}):\n    return {expression}\n"
    return source


@pytest.fixture(scope="module")
def case_module(tmp_path_factory):
    """All the cases as @jit functions of one real source file (babytriton reads source)."""
    path = tmp_path_factory.mktemp("eager_cases") / "cases.py"
    text = "import torch\nimport babytriton as bt\nfrom babytriton.ops import *\nfrom babytriton.codegen.library import table\n"
    text += "globals().update({n: op for n, op in table().items() if n not in globals()})\n\n"
    for name, (expression, args) in CASES.items():
        text += "@bt.jit(cache=False)\n" + _function(expression, len(args)).replace("def f(", f"def case_{name}(") + "\n"
    path.write_text(text)
    import importlib.util
    spec = importlib.util.spec_from_file_location("eager_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(CASES))
def test_table_entry_matches_the_compiled_op(name, case_module):
    both(getattr(case_module, f"case_{name}"), *CASES[name][1])


# torch's own result for some cases: the eager table's newer entries (compiled and eager must also give it)
TORCH_RESULTS = {
    "flip": lambda x: x.flip(1), "flip_negative": lambda x: x.flip(-2),
    "bucketize": torch.bucketize,
    "bucketize_right": lambda x, y: torch.bucketize(x, y, out_int32=True, right=True),
    "conv2d": lambda x, y: torch.nn.functional.conv2d(  # Relax's (top, left, bottom, right) padding
        torch.nn.functional.pad(x.reshape(1, 2, 1, 3), (0, 1, 1, 0)), y.reshape(3, 2, 1, 1), stride=(1, 2)),
}


@pytest.mark.parametrize("name", sorted(TORCH_RESULTS))
def test_table_entry_matches_torch(name, case_module):
    args = CASES[name][1]
    same(both(getattr(case_module, f"case_{name}"), *args), TORCH_RESULTS[name](*args))


def test_every_table_entry_is_exercised():
    covered = {expression.split("(")[0] for expression, _ in CASES.values()}
    covered |= {name for name in eager.TORCH if any(f"{name}(" in e for e, _ in CASES.values())}
    assert set(eager.TORCH) <= covered, set(eager.TORCH) - covered


def test_ops_without_a_torch_equivalent_say_so():
    @bt.jit
    def f(x):
        return nonzero(x)  # noqa: F821 - a Relax op the eager table lacks

    with pytest.raises(NotImplementedError, match="nonzero.. has no torch equivalent in babytriton's eager mode"):
        f.eager(torch.ones(3))


# -- every way of naming an op ------------------------------------------------------------------
def test_spellings_of_library_ops():
    @bt.jit
    def f(x):
        a = sigmoid(x) + bt.sigmoid(x) + R.sigmoid(x) + relax.op.sigmoid(x) + relax_exp(x)
        b = R.nn.softmax(x, axis=-1) + bt.softmax(x, dim=0)
        c = x.sum(axis=1) + x.sum(dim=1) + sum(x, axis=1) + x.max(axis=1) + max(x, axis=1)
        d = x.reshape(3, 2).T.astype("float64") + x.T.T.astype(torch.float64)
        return a, b, c, d, abs(x), round(x), x.mean(), x.argmax(axis=0)

    both(f, rand(2, 3))


def test_tensor_attributes_are_the_compilers():
    @bt.jit
    def f(x):
        same_dtype = 1 if x.dtype == "float16" else 0
        return x * x.shape[0] * x.ndim + same_dtype, len(x) + x.shape[1]

    both(f, rand(2, 3, dtype=torch.float16))


# -- Python numbers, runtime scalars and constexprs: the compiled dtypes ---------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.int8, torch.int32, torch.bool, torch.bfloat16])
def test_scalars_promote_as_compiled(dtype):
    @bt.jit
    def f(x, n: int, s: float, b: bool, c, k: bt.constexpr):
        y = x.astype("int32") if x.dtype == "bool" else x
        return y * n, y * s, y + c, y * k, b, n, s, y * 2.5, y // 2, n + s, k

    out = both(f, rand(2, 3).to(dtype) if dtype != torch.bool else rand(2, 3) > 0, 3, 0.5, True, 2, 4)
    assert out[4].dtype == torch.bool and out[5].dtype == torch.int64 and out[6].dtype == torch.float64


def test_returned_numbers_are_the_compilers_constants():
    @bt.jit
    def f(x, k: bt.constexpr):
        return k + 1, k * 0.5, k > 1, x

    out = both(f, rand(3), 2)
    assert [o.dtype for o in out[:3]] == [torch.int64, torch.float32, torch.bool]


def test_numpy_in_numpy_out():
    @bt.jit
    def f(x, y):
        return x * y + 1

    both(f, np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32))


# -- Python's meaning where the compiler's differs --------------------------------------------------
def test_logic_is_elementwise_on_tensors_and_short_circuits_on_python_values():
    @bt.jit
    def f(x, k: bt.constexpr):
        a = (x > 0) and (x < 1) or not (x > -1)
        b = x if x > 0.5 else -x
        c = 0 < x < 1
        d = k > 5 and undefined_name  # noqa: F821 - never evaluated, compiled or eager
        e = x * 2 if k > 0 else undefined_name  # noqa: F821
        return a, b, c, d, e

    both(f, rand(2, 3), 1)


def test_augmented_assignment_never_changes_an_argument():
    @bt.jit
    def f(x):
        y = x.T
        y += 1
        z = x.astype("float32")
        z *= 2
        return y, z

    x = rand(2, 3)
    before = x.clone()
    f.eager(x)
    torch.testing.assert_close(x, before)


def test_argument_checks_are_the_compiled_calls():
    @bt.jit
    def f(x: bt.Tensor((2, "n"), "float32"), n: int):
        return x * n

    for args, error in [((rand(3, 3), 2), ValueError), ((rand(2, 3), 2.5), TypeError), ((rand(2, 3),), TypeError)]:
        with pytest.raises(error) as compiled:
            f(*args)
        with pytest.raises(error) as eagerly:
            f.eager(*args)
        assert str(compiled.value) == str(eagerly.value)


def test_eager_refuses_what_the_compiler_refuses():
    @bt.jit
    def f(x):
        return x.mean(axis=0)

    with pytest.raises(TypeError, match=r"mean\(\): .*float") as eagerly:
        f.eager(torch.ones(2, 3, dtype=torch.int32))
    with pytest.raises(bt.CompilationError) as compiled:
        f(torch.ones(2, 3, dtype=torch.int32))
    assert str(eagerly.value) in str(compiled.value)

    @bt.jit
    def g(x):
        return x.log_add_exp(x)   # a Relax operator, not a tensor method

    with pytest.raises(AttributeError, match="call the operator instead: log_add_exp"):
        g.eager(rand(3))


def test_errors_point_at_the_users_line():
    @bt.jit
    def f(x):
        y = x + 1
        return y.log_add_exp(y)  # the line

    with pytest.raises(AttributeError) as info:
        f.eager(rand(3))
    frames = [(frame.filename, frame.lineno) for frame in traceback.extract_tb(info.value.__traceback__)]
    assert (__file__, line_of(f.fn, "# the line")) in frames


# -- control flow --------------------------------------------------------------------------------
def test_control_flow_matches():
    @bt.jit
    def f(x, n: int, k: bt.constexpr):
        if x.sum() > 0:
            y = x * 2
        elif x.max() > -1:
            y = x + 1
        else:
            y = -x
        if k > 1:  # decided while compiling
            y = y * k
        acc = zeros_like(x)
        for i in range(n):  # a runtime bound: a recursive function when compiled
            if i == 3:
                break
            acc = acc + y * i
        for i in range(20):  # longer than `unroll`
            if i % 2 == 0:
                continue
            acc = maximum(acc, y - i)
        c = zeros((), "int64")
        while c < 4:
            acc = acc - 0.5
            c = c + 1
        return acc, y

    for x in (rand(2, 3), rand(2, 3) - 5, -rand(2, 3).abs() - 2):
        both(f, x, 5, 2)
        both(f, x, 0, 1)


# -- calls: other @jit functions, TensorIR kernels, the TIR backend -------------------------------
@bt.jit
def scale(x, factor: float):
    return x * factor


@bt.jit
def shift(x, by):
    return x + by


def test_nested_jit_calls_bind_numbers_as_a_direct_call():
    @bt.jit
    def f(x):
        return scale(x, 2), shift(x.astype("float16"), 1.5), shift(3, 4)

    out = both(f, rand(3))
    assert out[2].dtype == torch.int64  # two 0-d int64 tensors, as a direct call passes


@T.prim_func(s_tir=True)
def double_rows(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(8)), "float32")
    C = T.match_buffer(c, (n, T.int64(8)), "float32")
    for i, j in T.grid(n, T.int64(8)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float32(2)


@T.prim_func
def plus_one(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        C[i, j] = A[i, j] + T.float32(1)


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


def test_kernels_run_through_tvm_on_their_own():
    @bt.jit
    def f(x, y):
        a = double_rows(x + 1)
        b = plus_one(a)
        c = repeat_first(y, bt.Tensor((5,), "float32"))   # a placeholder gives the output's size
        d = repeat_first(y, y)
        return b * 2, c, d

    both(f, rand(4, 8), rand(6))


def test_kernel_argument_errors_in_eager_mode():
    @bt.jit
    def f(x):
        return plus_one(x)

    with pytest.raises(TypeError, match="kernel `plus_one`'s buffer 'A' is float32 \\(4, 8\\), but argument 1"):
        f.eager(rand(4, 9))


def test_kernel_placeholders_are_checked_as_compiled():
    @bt.jit
    def f(x):
        return plus_one(x, bt.Tensor((4, 4), "float32"))

    @bt.jit
    def g(x: bt.Tensor(("n",), "float32")):
        return repeat_first(x, bt.Tensor(("n",), "float32"))  # the function's own size n

    with pytest.raises(bt.CompilationError) as compiled:
        f(rand(4, 8))
    with pytest.raises(TypeError) as eagerly:
        f.eager(rand(4, 8))
    assert compiled.value.message == str(eagerly.value)
    assert "buffer 'C' is float32 (4, 8), but the placeholder has size 4 on axis 1" in str(eagerly.value)
    both(g, rand(3))


# -- one set of rules: the compiler's, run with a builder of Relax or of torch values ---------------
def _patched(monkeypatch, module, name, change):
    """Replace the rule `module.name` by `change(rule, b, *args)`; the builders it ran with."""
    rule, builders = getattr(module, name), []

    def patched(b, *args):
        builders.append(type(b).__name__)
        return change(rule, b, *args)
    monkeypatch.setattr(module, name, patched)
    return builders


def test_a_changed_op_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """library.common_dtype decides `where`'s dtype for both: made to answer float64, both give float64."""
    monkeypatch.setattr(library, "common_dtype", lambda values: "float64")

    @bt.jit(cache=False)
    def f(c, x, y):
        return where(c, x, y)  # noqa: F821 - the library op

    assert both(f, rand(2, 3) > 0, rand(2, 3), rand(2, 3)).dtype == torch.float64


@pytest.mark.parametrize("rule", ["convert", "_widen_bools_and_ints", "_via_float32", "check_axis"])
def test_a_changed_op_rule_changes_the_compiled_and_the_eager_message(monkeypatch, rule):
    """Each rule the eager reference used to copy (argument conversion, dtype widening, half
    dtypes, axes) is the compiler's own: a refusal added to it comes from both paths, in its words."""
    def refuse(original, b, op, *args):
        if op.name == "maximum":
            raise Diagnostic(f"maximum() refused by the changed rule {rule}")
        return original(b, op, *args)
    builders = _patched(monkeypatch, library, rule, refuse)

    @bt.jit(cache=False)
    def f(x, y):
        return maximum(x, y)  # noqa: F821 - the library op

    with pytest.raises(bt.CompilationError) as compiled:
        f(rand(3), rand(3))
    with pytest.raises(TypeError) as eagerly:
        f.eager(rand(3), rand(3))
    assert compiled.value.message == str(eagerly.value) == f"maximum() refused by the changed rule {rule}"
    assert set(builders) == {"RelaxBuilder", "TorchBuilder"}


def _not_a_tensor(x):
    return exp("a")  # noqa: F821


def _misspelt_dtype(x):
    return x.astype("flaot32")


def _axis_of_a_wrong_type(x):
    return sum(x, axis="a")


def _axis_as_a_tensor(x):
    return sum(x, axis=x)


def _int_too_big(x):
    return add(x, 2**70)  # noqa: F821


@pytest.mark.parametrize("fn", [_not_a_tensor, _misspelt_dtype, _axis_of_a_wrong_type, _axis_as_a_tensor,
                                _int_too_big])
def test_argument_errors_are_the_compilers_word_for_word(fn):
    f = bt.jit(cache=False)(fn)
    with pytest.raises(bt.CompilationError) as compiled:
        f(rand(2, 3))
    with pytest.raises(TypeError) as eagerly:
        f.eager(rand(2, 3))
    assert compiled.value.message == str(eagerly.value)


def test_a_changed_kernel_call_rule_changes_the_compiled_and_the_eager_message(monkeypatch):
    def refuse(original, b, kernel, name, args, kwargs):
        raise Diagnostic(f"kernel `{name}` refused by the changed rule")
    builders = _patched(monkeypatch, kernels, "check_call", refuse)

    @bt.jit(cache=False)
    def f(x):
        return plus_one(x)

    with pytest.raises(bt.CompilationError) as compiled:
        f(rand(4, 8))
    with pytest.raises(TypeError) as eagerly:
        f.eager(rand(4, 8))
    assert compiled.value.message == str(eagerly.value) == "kernel `plus_one` refused by the changed rule"
    assert builders == ["RelaxBuilder", "TorchBuilder"]


# -- Python's operators: one rule each (codegen.semantic), run by the visitor and by eager -----------
def _both_refuse(f, *args) -> str:
    """The compiled and the eager call of `f` fail alike: the message."""
    with pytest.raises(bt.CompilationError) as compiled:
        f(*args)
    with pytest.raises(TypeError) as eagerly:
        f.eager(*args)
    assert compiled.value.message == str(eagerly.value)
    return str(eagerly.value)


def test_a_changed_operand_rule_changes_the_compiled_and_the_eager_message(monkeypatch):
    def refuse(original, b, value):
        if isinstance(value, float) and value == 2.5:
            raise Diagnostic("2.5 refused by the changed operand rule")
        return original(b, value)
    builders = _patched(monkeypatch, semantic, "operand", refuse)

    @bt.jit(cache=False)
    def f(x):
        return add(x, 2.5)  # noqa: F821 - the library op

    assert _both_refuse(f, rand(3)) == "2.5 refused by the changed operand rule"
    assert {"RelaxBuilder", "TorchBuilder"} <= set(builders)


def test_a_changed_matmul_rule_changes_the_compiled_and_the_eager_message(monkeypatch):
    def refuse(original, b, lhs, rhs):
        raise Diagnostic(f"`@` refused by the changed rule on {b.describe(lhs)}")
    builders = _patched(monkeypatch, semantic, "check_matmul", refuse)

    @bt.jit(cache=False)
    def f(x, y):
        return matmul(x, y)  # noqa: F821 - the library op: `x @ y`

    assert _both_refuse(f, rand(2, 3), rand(3, 4)) == \
        "`@` refused by the changed rule on a float32 tensor of shape (2, 3)"
    assert builders == ["RelaxBuilder", "TorchBuilder"]


def test_the_matmul_rule_is_the_compilers_word_for_word():
    @bt.jit(cache=False)
    def f(x, y):
        return matmul(x, y)  # noqa: F821 - the library op

    assert _both_refuse(f, rand(2, 3), rand(3, 4, dtype=torch.float64)) == \
        "`@` needs operands of one dtype, got float32 and float64; convert one with .astype()"


def test_a_changed_logical_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """`and` made to compute `or`: both paths give the element-wise or."""
    builders = _patched(monkeypatch, semantic, "logical", lambda original, b, symbol, lhs, rhs: original(b, "or", lhs, rhs))

    @bt.jit(cache=False)
    def f(x, y):
        return (x > 0) and (y > 0)

    x, y = rand(4, 5), rand(4, 5)
    assert torch.equal(both(f, x, y), (x > 0) | (y > 0))
    assert builders == ["RelaxBuilder", "TorchBuilder"]


def test_a_changed_bool_op_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """Short-circuiting on compile-time values, `and` made to decide as `or`: `0 and 2` gives 2 on both paths."""
    rule, calls = semantic.bool_op, []

    def patched(symbol, *args):
        calls.append(symbol)
        return rule("or" if symbol == "and" else symbol, *args)
    monkeypatch.setattr(semantic, "bool_op", patched)

    @bt.jit(cache=False)
    def f(x, k: bt.constexpr):
        return x * (k and 2)

    x = rand(3)
    torch.testing.assert_close(both(f, x, 0), x * 2)
    assert calls == ["and", "and"]


def test_a_changed_chain_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """`a < b < c` made to keep only its last comparison: both paths give `b < c`."""
    rule, calls = semantic.chain, []

    def patched(left, comparisons, compare, combine):
        calls.append(len(comparisons))
        return rule(left, comparisons, compare, lambda first, last: last)
    monkeypatch.setattr(semantic, "chain", patched)

    @bt.jit(cache=False)
    def f(x, y, z):
        return x < y < z

    x, y, z = rand(4, 5), rand(4, 5), rand(4, 5)
    assert torch.equal(both(f, x, y, z), y < z)
    assert calls == [2, 2]


def test_a_changed_negation_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """`not m` and `~m` made to keep m: both paths give m."""
    builders = _patched(monkeypatch, semantic, "negation", lambda original, b, symbol, value: value)

    @bt.jit(cache=False)
    def f(x):
        return not (x > 0), ~(x < 0)

    x = rand(6)
    got_not, got_invert = both(f, x)
    assert torch.equal(got_not, x > 0) and torch.equal(got_invert, x < 0)
    assert builders == ["RelaxBuilder", "RelaxBuilder", "TorchBuilder", "TorchBuilder"]


def _invert_a_float(x):
    return ~x


def _not_a_float(x):
    return not x


def _not_a_string(x):
    return not "a"


@pytest.mark.parametrize("fn, message", [
    (_invert_a_float, "`~` needs a bool or integer tensor, got a float32 tensor of shape (3,)"),
    (_not_a_float, "`not` needs a bool tensor, got a float32 tensor of shape (3,); compare it first, e.g. `x == 0`"),
    (_not_a_string, "`not` cannot be applied to str 'a'"),
])
def test_negation_errors_are_the_compilers_word_for_word(fn, message):
    assert _both_refuse(bt.jit(cache=False)(fn), rand(3)) == message


def test_a_changed_tensor_description_changes_the_compiled_and_the_eager_message(monkeypatch):
    monkeypatch.setattr(values, "describe_tensor", lambda dtype, shape: f"<{dtype} {list(shape)}>")

    @bt.jit(cache=False)
    def f(x):
        return not x

    assert _both_refuse(f, rand(3)) == "`not` needs a bool tensor, got <float32 [3]>; compare it first, e.g. `x == 0`"


def test_a_changed_python_call_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """abs() made to compute max(): both paths give max(x)."""
    builders = _patched(monkeypatch, semantic, "python_call",
                        lambda original, b, func, args, kwargs: original(b, max, args, kwargs))

    @bt.jit(cache=False)
    def f(x):
        return abs(x)

    x = rand(4, 5)
    torch.testing.assert_close(both(f, x), x.max())
    assert builders == ["RelaxBuilder", "TorchBuilder"]


def _int_of_a_tensor(x):
    return int(x)


def _max_of_two_tensors(x):
    return max(x, x)


@pytest.mark.parametrize("fn, message", [
    (_int_of_a_tensor, "int() works on compile-time numbers only, got a float32 tensor of shape (3,); "
                       "convert a tensor with .astype('int64')"),
    (_max_of_two_tensors, "max(a, b) of tensors: use maximum(a, b) for the element-wise maximum; "
                          "max(x, axis=...) reduces along axes"),
])
def test_python_call_errors_are_the_compilers_word_for_word(fn, message):
    assert _both_refuse(bt.jit(cache=False)(fn), rand(3)) == message


def test_a_changed_if_else_rule_changes_the_compiled_and_the_eager_result(monkeypatch):
    """`a if c else b` made to choose the other side: both paths give where(c, b, a)."""
    builders = _patched(monkeypatch, semantic, "if_else",
                        lambda original, b, cond, body, orelse: original(b, cond, orelse, body))

    @bt.jit(cache=False)
    def f(x, y):
        return x if x > y else y

    x, y = rand(4, 5), rand(4, 5)
    assert torch.equal(both(f, x, y), torch.minimum(x, y))
    assert builders == ["RelaxBuilder", "TorchBuilder"]


def test_if_else_operand_errors_are_the_compilers_word_for_word():
    @bt.jit(cache=False)
    def f(x):
        return x if x > 0 else "a"

    assert _both_refuse(f, rand(3)) == "expected a tensor or a number, got str 'a'"


def test_tir_backend_runs_as_python():
    @bt.jit(backend="tir")
    def f(x, out, k: int):
        for i in bt.parallel(x.shape[0]):
            acc = 0.0
            for j in range(x.shape[1]):
                acc += x[i, j] * k
            out[i] = acc

    x = rand(3, 4)
    compiled_out, eager_out = torch.empty(3), torch.empty(3)
    same(f.eager(x, eager_out, 2), f(x, compiled_out, 2))
    torch.testing.assert_close(eager_out, (x * 2).sum(1))


def test_device_blocks_run_where_the_data_is():
    @bt.jit
    def f(x):
        with bt.device("cpu"):
            y = x * 2
        return y + 1

    both(f, rand(3))


# -- BABYTRITON_INTERPRET=1, print and breakpoint ------------------------------------------------
def test_interpret_runs_every_call_eagerly(monkeypatch, capsys):
    monkeypatch.setenv("BABYTRITON_INTERPRET", "1")

    @bt.jit
    def f(x):
        print("shape", x.shape)
        return sigmoid(x) * 2

    x = rand(3)
    torch.testing.assert_close(f(x), torch.sigmoid(x) * 2)
    assert "shape (3,)" in capsys.readouterr().out
    assert f.cache_info()["compilations"] == 0
    monkeypatch.delenv("BABYTRITON_INTERPRET")

    @bt.jit
    def g(x):
        return x + 1

    g(x)  # read at decoration: g compiles
    assert g.cache_info()["compilations"] == 1 and f.cache_info()["compilations"] == 0


def test_print_compiled_points_to_eager_mode():
    @bt.jit
    def f(x):
        print(x)
        return x

    with pytest.raises(bt.CompilationError, match="run the function eagerly"):
        f(rand(3))


def test_breakpoint_stops_at_the_users_line(monkeypatch):
    stops = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: stops.append(
        (sys._getframe(1).f_code.co_filename, sys._getframe(1).f_lineno, dict(sys._getframe(1).f_locals))))

    @bt.jit
    def f(x):
        y = x * 2
        breakpoint()  # stop here
        return y

    f.eager(rand(3))
    (filename, lineno, local_names), = stops
    assert filename == __file__ and lineno == line_of(f.fn, "# stop here")
    assert {"x", "y"} <= set(local_names)


def test_closures_and_defaults():
    def make(bias):
        @bt.jit
        def f(x, k: bt.constexpr = 3):
            return x * k + bias
        return f

    both(make(1.5), rand(3))
    both(make(2), rand(3), 5)


@pytest.mark.gpu
def test_eager_on_the_gpu():
    @bt.jit(target="gpu")
    def f(x, n: int):
        return double_rows(softmax(x, axis=1) * n), x.sum(axis=0)

    both(f, rand(4, 8).cuda(), 3)
