"""Scalar dtype rules audited against torch: every kind of operand (dimensioned and 0-d tensors,
reduction results, run-time int/float/bool parameters, Python constants, globals, constexprs, and
numbers that pass through a run-time `if` or a loop compiled as a function) under every binary
operator, comparison and `where`, straight or inside such an `if` or loop, compiled and eager,
against torch.result_type and torch's values (Python numbers standing for the run-time scalars and
constants, as in torch)."""
import importlib.util
import os

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import babytriton as bt

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool"]
NUMBERS = {"int": 3, "float": 2.5, "bool": True}
# operand kind -> (source expression in the @jit function, how torch gets it)
TENSOR_KINDS = ("tensor", "zero_d", "reduced")
SCALAR_KINDS = ("param", "const", "global", "constexpr", "merged", "carried", "counted")
CONTEXTS = ("straight", "if", "loop")
TRIPS = 17  # above the default unroll=16: the loop becomes a recursive function, its inputs arguments
# setup lines of the kinds that pass a number through control flow chosen at run time (`c.sum() > 0` holds)
_SETUP = {
    "merged": ["w{i} = {number!r}", "if c.sum() > 0:", "    w{i} = v{i}"],  # a number or a run-time scalar
    "carried": ["w{i} = v{i}", f"for k in range({TRIPS}):", "    w{i} = {keep}"],  # a run-time scalar
    "counted": ["w{i} = {number!r}", f"for k in range({TRIPS}):", "    w{i} = {count}"],  # the index `k`
}
OPS = ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<", "==", ">=", "where", "where_op"]


def _values(dtype: str, shape):
    d = getattr(torch, dtype)
    if d == torch.bool:
        return torch.tensor([True, False, True][: (shape[0] if shape else 1)]).reshape(shape)
    return torch.tensor([1, 2, 5][: (shape[0] if shape else 1)], dtype=d).reshape(shape)


def _operand(i: int, kind: str, sort: str):
    """(parameter source, argument, expression in the function, the value torch computes with,
    statements that compute the expression's value first)."""
    name = f"v{i}"
    if kind in _SETUP:
        number = NUMBERS[sort]
        keep, count = (f"w{i} & True", f"w{i} & (k >= 0)") if sort == "bool" else (f"w{i} * 1", f"w{i} + 0 * k")
        setup = [line.format(i=i, number=number, keep=keep, count=count) for line in _SETUP[kind]]
        return f"{name}: {sort}", number, f"w{i}", number, setup
    return (*_plain_operand(i, kind, sort), [])


def _plain_operand(i: int, kind: str, sort: str):
    name = f"v{i}"
    if kind == "tensor":
        t = _values(sort, (3,))
        return f"{name}", t, name, t
    if kind == "zero_d":
        t = _values(sort, ())
        return f"{name}", t, name, t
    if kind == "reduced":  # a 0-d result of a reduction
        t = _values(sort, (3,))
        return f"{name}", t, f"max({name}, axis=0)", torch.amax(t.int() if t.dtype == torch.bool else t).to(t.dtype)
    number = NUMBERS[sort]
    if kind == "param":
        return f"{name}: {sort}", number, name, number
    if kind == "const":
        return None, None, repr(number), number
    if kind == "global":
        return None, None, f"G_{sort.upper()}", number
    return f"{name}: bt.constexpr", number, name, number


def _torch_op(op: str, a, b, cond):
    if op in ("where", "where_op"):
        return torch.where(cond, a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) \
            else torch.where(cond, torch.tensor(a), b)
    return eval(f"a {op} b")  # noqa: S307 - a fixed operator table


def _compile(tmp_path, count: list, params: list, body: str, setup=(), context: str = "straight"):
    """The @jit function computing `body` after `setup`: straight, or again in a run-time `if` or in a
    loop compiled as a recursive function (where run-time scalars come in as its arguments)."""
    count[0] += 1
    path = tmp_path / f"promo_{count[0]}.py"
    lines = [*setup, f"r = {body}"]
    if context == "if":
        lines += ["if c.sum() > 0:", f"    r = {body}"]
    elif context == "loop":
        lines += [f"for j in range({TRIPS}):", f"    r = {body}"]
    source = "\n".join("    " + line for line in [*lines, "return r"])
    path.write_text("import babytriton as bt\nG_INT, G_FLOAT, G_BOOL = 3, 2.5, True\n\n\n@bt.jit\n"
                    f"def f(c, {', '.join(params)}):\n{source}\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


_COUNT = [0]
operand = st.tuples(st.sampled_from(TENSOR_KINDS + SCALAR_KINDS), st.sampled_from(DTYPES + list(NUMBERS)))


@settings(max_examples=int(os.environ.get("PROMOTION_EXAMPLES", 20)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left=operand, right=operand, swap=st.booleans(), context=st.sampled_from(CONTEXTS))
# a uint8 reduction repeated inside an `if`: TVM's CanonicalizeBindings failed after ReductionsOnce
@example(left=("tensor", "uint8"), right=("reduced", "uint8"), swap=False, context="if")
def test_operators_promote_as_torch(tmp_path, left, right, swap, context):
    sides = []
    for i, (kind, sort) in enumerate((left, right)):
        if (kind in TENSOR_KINDS) != (sort in DTYPES):  # a tensor has a dtype, a number a kind
            sort = "float32" if kind in TENSOR_KINDS else "float"
        sides.append(_operand(i, kind, sort))
    if not any(isinstance(s[3], torch.Tensor) for s in sides):
        sides[0] = _operand(0, "tensor", "int32")  # numbers alone are Python's business
    if swap:
        sides.reverse()
    (pa, aa, ea, ta, sa), (pb, ab, eb, tb, sb) = sides
    params = [p for p in (pa, pb) if p]
    args = [a for p, a in ((pa, aa), (pb, ab)) if p]
    cond = torch.tensor([True, False, True])
    expected, body = [], []
    for op in OPS:
        try:
            want = _torch_op(op, ta, tb, cond)
        except RuntimeError:
            continue  # torch refuses (bitwise on floats, arithmetic on bools): so does babytriton
        if want.dtype == torch.bool and op not in ("<", "==", ">=", "&", "|", "^", "where", "where_op"):
            continue  # bool arithmetic: babytriton refuses it (documented)
        expected.append(want)
        body.append(f"({ea} if c else {eb})" if op == "where" else f"bt.where(c, {ea}, {eb})" if op == "where_op"
                    else f"({ea} {op} {eb})")
    if not body:
        return
    f = _compile(tmp_path, _COUNT, params, ", ".join(body) + ",", sa + sb, context)
    for run in (f, f.eager):
        got = run(cond, *args)
        for source, g, want in zip(body, got, expected):
            assert g.dtype == want.dtype, (source, run, g.dtype, want.dtype)
            torch.testing.assert_close(g.expand_as(want) if g.dim() < want.dim() else g, want,
                                       equal_nan=True, msg=source)


@pytest.mark.parametrize("op", ["*", "+", "/", "<"])
def test_runtime_float_scalar_keeps_an_int_tensors_float32(op):
    """The issue's example: `x * s` with `s: float` is float32 for an int32 x, as in torch."""
    @bt.jit
    def f(x, s: float):
        return x * s, x + s, x / s, x < s, s * 2 * x, -s * x

    x = torch.arange(4, dtype=torch.int32)
    want = (x * 2.5, x + 2.5, x / 2.5, x < 2.5, 2.5 * 2 * x, -2.5 * x)
    for run in (f, f.eager):
        for got, w in zip(run(x, 2.5), want):
            assert got.dtype == w.dtype
            torch.testing.assert_close(got, w)


def half_with_numbers(x, s: float):
    return x * s, x / s, s * x, x * 1.01, x / 3.3, 0.7 * x, x * 1e5, x + s, x - 0.3, s - x, x + 1.01


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_tensor_with_a_number_as_torchs_kernels(dtype):
    """`*` and `/` of a half tensor and a number take the number's float32 value and round once, as
    torch's kernels do (x * 1e5 was inf for a float16 x = 0.5: 1e5 was rounded to float16 first);
    `+` and `-` add the number rounded to the half dtype, as torch's CPU kernels do."""
    torch.manual_seed(0)
    x = torch.cat([torch.randn(10000) * 10, torch.tensor([0.5, 66.125, -0.0, float("inf"), float("nan")])]).to(dtype)
    s = 0.1
    want = (x * s, x / s, s * x, x * 1.01, x / 3.3, 0.7 * x, x * 1e5, x + s, x - 0.3, s - x, x + 1.01)
    f = bt.jit(target="cpu")(half_with_numbers)
    for run in (f, f.eager):   # the eager reference too: a run-time float takes part as torch's number
        for i, (g, w) in enumerate(zip(run(x, s), want)):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=f"{run} output {i}")


def to_bfloat16_inside(a, b, c, s: float):
    return (a * b).astype("bfloat16") + c, c + s, c - s


def test_conversions_to_bfloat16_inside_a_cpu_kernel_round():
    """A run-time float meeting a bfloat16 tensor is rounded to bfloat16 inside the kernel, as torch
    rounds it: TVM's llvm lowering computes bfloat16 in float32 and rounded only at stores (`c + s`
    near c = -s was off by the rounding of s). A float32 value converted inside a kernel is rounded at
    the store, as TVM's bfloat16 arithmetic is (README): close to torch, not equal."""
    torch.manual_seed(0)
    a, b = torch.randn(20000), torch.randn(20000)
    c = torch.randn(20000).to(torch.bfloat16) * 0.2
    converted, plus, minus = bt.jit(target="cpu")(to_bfloat16_inside)(a, b, c, 0.1)
    torch.testing.assert_close(plus, c + 0.1, rtol=0, atol=0)
    torch.testing.assert_close(minus, c - 0.1, rtol=0, atol=0)
    torch.testing.assert_close(converted, (a * b).to(torch.bfloat16) + c, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_tensor_with_a_number_as_torchs_cuda_kernels(dtype):
    """On a GPU torch computes `+` and `-` with a number in float32 too: so does the compiled code."""
    torch.manual_seed(0)
    x = torch.cat([torch.randn(10000) * 10, torch.tensor([0.5, 66.125, -0.0, float("inf"), float("nan")])])
    x = x.to(dtype).cuda()
    got = bt.jit(target="gpu")(half_with_numbers)(x, 0.1)
    for i, (g, w) in enumerate(zip(got, half_with_numbers(x, 0.1))):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=f"output {i}")


def half_library_numbers(x, s: float):
    return multiply(x, s), divide(x, 3.3), add(x, 0.1), subtract(x, s), multiply(0.7, x), multiply(x, 1e5)  # noqa: F821


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_library_spellings_of_the_operators_follow_their_rule(dtype):
    """`multiply(x, 0.1)` is `x * 0.1`: the number in float32 where the operator takes it so."""
    torch.manual_seed(0)
    x = (torch.randn(10000) * 10).to(dtype)
    want = (torch.multiply(x, 0.1), torch.divide(x, 3.3), torch.add(x, 0.1), torch.subtract(x, 0.1),
            torch.multiply(x, 0.7), torch.multiply(x, 1e5))
    f = bt.jit(target="cpu")(half_library_numbers)
    for run in (f, f.eager):
        for i, (g, w) in enumerate(zip(run(x, 0.1), want)):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=f"output {i}")
