"""The Relax operator library as @jit code sees it: one table of names -> TVM's Relax op functions.

The table holds every public function of `tvm.relax.op` and `tvm.relax.op.nn`, less Relax's runtime
plumbing (`call_tir`, closures, printing, shapes as values). A bare name the function does not bind
(`sigmoid(x)`), a Relax function reached through the globals (`R.sigmoid`, `relax.op.nn.softmax`,
`from tvm.relax.op import exp`), babytriton's re-exports (`bt.softmax`) and the tensor methods
(`x.sum(axis=-1)`, `x.T`) all resolve to an entry of this table and are called the same way.

How each argument is read comes from the op's own Python signature (an unannotated parameter by the
type its docstring gives): a parameter annotated as a Relax expression takes tensors, and Python numbers there take the tensors' dtype; `*dtype`
parameters take names or torch dtypes; shapes take tuples of sizes; anything else is a compile-time
Python value checked against its annotation. Element-wise binary ops promote dtypes as torch does,
and bools and integers follow torch where TVM would go wrong (the tables below). Otherwise library
ops keep Relax's semantics where they differ from torch: `max(x, axis=...)` returns the values only
(torch returns values and indices), integer `divide` truncates, `std`/`variance` are population
statistics. Python's operators follow torch. NaN and ±inf follow torch too: the ops whose TVM lowering
drops a NaN (maximum, minimum, relu, clip, max, min, argmax, argmin, float `!=`) are legalized by
babytriton (babytriton/operators/legalize.py), not here.
"""
from __future__ import annotations

import ast
import difflib
import functools
import inspect
import math
import os
import re
import types
import typing
from dataclasses import dataclass

import numpy as np
import torch
import tvm
from tvm import relax

from ..operators import legalize
from ..core.errors import Diagnostic
from ..core.types import DTYPES, TORCH_TO_NAME, dtype_name, is_float_dtype
from . import operators
from . import values as core  # the value helpers the visitors share

NAMESPACES = (relax.op, relax.op.nn)
# Relax's runtime plumbing lives in one module of relax.op: calls into other functions, closures,
# printing, asserts, shapes as values, devices. None of it is tensor math.
PLUMBING_MODULE = "tvm.relax.op.base"
NOT_OPS = {"wrap_param"}  # marks a constant as a parameter; no tensor computation

# Ops whose tensor operands follow torch's type promotion, as Python's operators do here: the
# element-wise binary family (every operand) and `where`'s two value operands.
BINARY_MODULE = "tvm.relax.op.binary"
UNARY_MODULE = "tvm.relax.op.unary"
PROMOTED = {"where": ("x1", "x2")}
# Element-wise ops beyond the binary family: their operands broadcast together.
ELEMENTWISE = {"where", "ewise_fma"}
# Ops that mean the same as a Python operator when called with their two operands only: they
# compile as the operator does (`matmul(a, b)` is `a @ b`, which accumulates float16 in float32 like
# torch; `power(a, 3)` is `a ** 3`, exact on integers).
SAME_AS_OPERATOR = {
    "matmul": lambda cg, x1, x2: cg.matmul(x1, x2),
    "power": lambda cg, x1, x2: cg.binary(ast.Pow(), x1, x2),
}
# Library ops spelling an operator: where the operator has a rule of its own for a half tensor and a
# number (computed in float32, as torch does), `multiply(x, 0.1)` follows it as `x * 0.1` does.
AS_OPERATOR = {"add": ast.Add, "subtract": ast.Sub, "multiply": ast.Mult, "divide": ast.Div}
# Float-only binary ops (TVM would miscompile integers): refused on integer and bool tensors, like
# exp or sqrt, whose Relax type rules refuse them.
FLOAT_ONLY = {"atan2", "log_add_exp", "mean", "std", "variance"}
# Bool tensors. TVM's code generators mishandle bool operands of most arithmetic (relax_expressions.py
# compares bools as int8 for the same reason), so: comparisons, max/min and sign-like ops compute bools as
# int8 (a value result converts back to bool), and so does `where` choosing between bools (its
# vectorised select mixed bool and int8 lanes: found by the fuzzer); arithmetic on bools is refused, as Python's operators
# refuse it here; sums and products of bools and integers accumulate in int64, as in torch.
BOOL_AS_INT8 = {fn.__name__ for fn in operators.COMPARE.values()} | {
    "maximum", "minimum", "max", "min", "argmax", "argmin", "abs", "negative", "sign", "square", "relu",
    "relu6", "isfinite", "isinf", "isnan"}
BOOL_REFUSED = {fn.__name__ for fn in operators.ARITH.values()} | {
    "mod", "log_add_exp", "atan2", "left_shift", "right_shift", "floor", "ceil", "round", "trunc"}
INT64_ACCUMULATE = {"sum", "prod", "cumsum", "cumprod"}
# Ops TVM cannot build in a half dtype (or, for sorts, builds wrong): they run on float32 copies,
# which hold every half value exactly, and float results are rounded back once (as torch computes
# half ops). Found by the fuzzer and by checking every op of the eager table in each dtype.
VIA_FLOAT32 = {
    "bfloat16": {"argmax", "argmin", "isnan", "isinf", "isfinite", "mod", "log_add_exp", "layer_norm", "sort",
                 "argsort", "topk", "max", "min"},  # max/min: CUDA code prints a bfloat16 -inf as `inff`
    "float16": {"atan", "asin", "acos", "asinh", "acosh", "sinh", "cosh", "atan2"},
}
# Scans accumulate too (see HALF_ACCUMULATE below), and TVM builds them past LegalizeOps: float32 copies.
for _half in VIA_FLOAT32.values():
    _half |= {"cumsum", "cumprod"}
# Ops that add up many elements accumulate in float32 in a half dtype, and gelu/silu/... compute in
# float32 (legalize.HALF_IN_FLOAT32, the rule's home); the eager reference computes them on float32
# copies like VIA_FLOAT32.
HALF_IN_FLOAT32 = legalize.HALF_IN_FLOAT32
# Reductions with no value for an empty axis (torch raises): a reduced size of 0 is an error, at
# compile time when it is static, at run time (before any kernel runs) when it is symbolic.
NO_IDENTITY = {"max", "min", "argmax", "argmin"}
# The prefix of a run-time check's message: jit shows such messages as they are.
RUN_TIME_CHECK = "babytriton check: "
# Ops whose TVM kernels only take these float dtypes (float64 would fail to build).
# (TVM's rms_norm computes float64 in float32: refused rather than silently less precise.)
FLOAT_DTYPES_ONLY = {"layer_norm": ("float32", "float16", "bfloat16"), "rms_norm": ("float32", "float16", "bfloat16")}
# Ops whose `axis` counts the input's axes, which TVM does not check for them (a bad one fails the
# build, or the run): checked here, as Relax checks the other ops'.
INPUT_AXIS = {"sort", "argsort", "topk", "cumsum", "cumprod", "repeat", "split", "take", "gather_elements"}
# Reductions for which no axes (`axis=()`) means every axis, as torch's `dim=()` does; Relax, like
# numpy, would reduce none and return the input.
ALL_AXES_WHEN_NONE_GIVEN = {"sum", "mean", "max", "min", "prod", "std", "variance"}
# Ops TVM cannot build on 1-d tensors: they run on a (1, n) view.
AS_ROW = {"rms_norm"}
# Logical ops take any tensor as "nonzero" (torch's rule; TVM would miscompile non-bools); bitwise
# ops need integers or bools.
LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}
BITWISE = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift"}
TENSOR_KINDS = ("tensor", "optional tensor")
# Parameters annotated as expressions that Relax takes as scalars (TIR values), not tensors.
SCALAR_PARAMS = {"clip": ("min", "max")}
# Parameters annotated as expressions that Relax takes as lists of ints (strided_slice's `axes=[0]`).
SIZES_PARAMS = {"strided_slice": ("axes", "begin", "end", "strides")}
# Integer index tensors: a Python int or list of ints is an int64 index, never promoted with the data.
INDEX_PARAMS = {"take": ("indices",), "gather_elements": ("indices",), "gather_nd": ("indices",),
                "scatter_elements": ("indices",), "scatter_nd": ("indices",), "one_hot": ("indices",)}
# torch spellings of keyword arguments, accepted wherever the op has the Relax spelling.
KEYWORD_ALIASES = {"dim": "axis", "keepdim": "keepdims"}
# torch / numpy names of ops that Relax spells otherwise: only for "did you mean" hints.
OTHER_NAMES = {
    "cat": "concat", "concatenate": "concat", "transpose": "permute_dims", "permute": "permute_dims",
    "clamp": "clip", "pow": "power", "sub": "subtract", "mul": "multiply", "div": "divide",
    "neg": "negative", "amax": "max", "amin": "min", "var": "variance", "unsqueeze": "expand_dims",
    "expand": "broadcast_to", "view": "reshape", "to": "astype", "type": "astype", "mm": "matmul",
    "bmm": "matmul", "dot": "matmul", "logsumexp": "log_add_exp", "hardtanh": "clip",
}

# Tensor methods: method name -> (op name, the parameter that collects extra positional arguments,
# so that `x.reshape(2, 3)` means `reshape(x, (2, 3))` as in torch).
METHODS = {
    "sum": ("sum", None), "mean": ("mean", None), "max": ("max", None), "min": ("min", None),
    "prod": ("prod", None), "argmax": ("argmax", None), "argmin": ("argmin", None),
    "reshape": ("reshape", "shape"), "astype": ("astype", None), "permute_dims": ("permute_dims", "axes"),
}
# Tensor properties computed by an op: `x.T` reverses the axes (numpy's and torch's meaning).
PROPERTIES = {"T": "permute_dims"}

Expr = tvm.ir.Expr
_NONE = type(None)


@dataclass(frozen=True, eq=False)
class Op:
    """One entry of the table: a Relax op function and how to read each of its parameters."""
    name: str
    fn: typing.Callable
    signature: inspect.Signature
    kinds: dict  # parameter name -> "tensor" | "optional tensor" | "tensors" | "shape" | "optional shape" |
    #                                 "index" | "dtype" | "scalar" | "value"
    promoted: tuple  # parameters whose operands are promoted to one dtype

    @property
    def display(self) -> str:
        """The signature without annotations, e.g. `sum(x, axis=None, keepdims=False)`."""
        params = [p.replace(annotation=inspect.Parameter.empty) for p in self.signature.parameters.values()]
        return f"{self.name}({', '.join(str(p) for p in params)})"

    def __repr__(self):
        return f"<library op {self.display}>"


@dataclass(frozen=True, eq=False)
class Method:
    """`x.sum` before it is called: a library op with the tensor as its first argument."""
    op: Op
    tensor: relax.Expr
    name: str
    varargs: str | None

    def __repr__(self):
        return f"<tensor method .{self.name}()>"


# ----------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def table() -> dict[str, Op]:
    ops = {}
    for namespace in NAMESPACES:
        for name in dir(namespace):
            fn = getattr(namespace, name)
            if name.startswith("_") or not inspect.isfunction(fn) or name in NOT_OPS or name in ops:
                continue
            if not fn.__module__.startswith("tvm.relax.op") or fn.__module__ == PLUMBING_MODULE:
                continue
            ops[name] = _make_op(name, fn)
    return ops


@functools.lru_cache(maxsize=None)
def _by_function() -> dict[int, Op]:
    return {id(op.fn): op for op in table().values()}


def _make_op(name: str, fn) -> Op:
    signature = _with_documented_types(fn, inspect.signature(fn))
    kinds = {p.name: _param_kind(name, p) for p in signature.parameters.values()}
    if fn.__module__ == BINARY_MODULE:
        promoted = tuple(p for p, kind in kinds.items() if kind == "tensor")
    else:
        promoted = PROMOTED.get(name, ())
    return Op(name, fn, signature, kinds, promoted)


# A few Relax ops leave their parameters unannotated (flip, bucketize, einsum, the detection ops); their
# docstrings give each type as numpydoc does, `data : relax.Expr`, which is read instead.
_DOC_PARAM = re.compile(r"^\s*(\w+)\s*:\s*(.*?)\s*$", re.M)
_DOC_SECTION_END = re.compile(r"\n\w+\n-{3,}")  # the next section's title (Returns)
_DOC_TYPES = {"relax.Expr": Expr, "int": int, "float": float, "bool": bool, "str": str}
_DOC_TENSORS = re.compile(r"\b(?:List|Tuple)\[relax\.Expr\]")


def _with_documented_types(fn, signature: inspect.Signature) -> inspect.Signature:
    """The op's signature with each unannotated parameter annotated by its docstring's type (as far as
    that says one of the types `_param_kind` and `_accepts` read; otherwise left unannotated)."""
    documented = _documented_types(fn)
    params = []
    for p in signature.parameters.values():
        if p.annotation is inspect.Parameter.empty and p.name in documented:
            annotation = _documented_annotation(documented[p.name])
            if annotation is not inspect.Parameter.empty and p.default is None:
                annotation = annotation | None
            p = p.replace(annotation=annotation)
        params.append(p)
    return signature.replace(parameters=params)


def _documented_types(fn) -> dict[str, str]:
    """Parameter name -> the type its docstring's Parameters section writes (`relax.Expr`, `int, optional`)."""
    section = (inspect.getdoc(fn) or "").partition("Parameters\n----------")[2]
    found = {}
    for name, text in _DOC_PARAM.findall(_DOC_SECTION_END.split(section)[0]):
        found.setdefault(name, text)
    return found


def _documented_annotation(text: str):
    """A docstring's type as an annotation: a Relax expression, a list or tuple of them, a Python
    scalar type; "optional" only says the parameter has a default. Empty for anything else."""
    text = text.removesuffix(", optional").strip()
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    text = optional.group(1) if optional else text
    if _DOC_TENSORS.search(text):
        return Expr | list[Expr] | tuple[Expr, ...]
    return _DOC_TYPES.get(text, inspect.Parameter.empty)


def _options(annotation) -> tuple:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _param_kind(op_name: str, param: inspect.Parameter) -> str:
    if param.name in SCALAR_PARAMS.get(op_name, ()):
        return "scalar"
    if param.name in SIZES_PARAMS.get(op_name, ()):
        return "optional shape" if param.default is None else "shape"
    if param.name in INDEX_PARAMS.get(op_name, ()):
        return "index"
    if param.name.endswith("dtype"):
        return "dtype"
    options = _options(param.annotation)
    if Expr not in options:
        return "value"
    rest = [o for o in options if o is not Expr]
    if not rest:
        return "tensor"
    if rest == [_NONE]:
        return "optional tensor"
    if all(typing.get_origin(o) in (list, tuple) for o in rest):
        inner = {a for o in rest for a in typing.get_args(o)}
        return "tensors" if inner <= {Expr, Ellipsis} else "shape"
    return "value"


def names() -> set[str]:
    return set(table())


def lookup(name: str) -> Op | None:
    """The op for a bare name, if the library has one."""
    return table().get(name)


def resolve(value) -> Op | None:
    """The op a compile-time value stands for: a Relax op function (`R.sigmoid`), a babytriton
    re-export (`bt.sigmoid`), or an Op already."""
    if isinstance(value, Op):
        return value
    exported = getattr(value, "__babytriton_op__", None)
    if isinstance(exported, str):
        return table().get(exported)
    return _by_function().get(id(value))


def suggest(name: str, candidates) -> str | None:
    """The closest candidate to a misspelt name (or Relax's name for a torch one), if any."""
    if name in OTHER_NAMES:
        return OTHER_NAMES[name]
    hint = difflib.get_close_matches(name, sorted(candidates), n=1)
    return hint[0] if hint else None


def did_you_mean(name: str, candidates) -> str:
    """A "; did you mean 'x'?" ending for a message (empty when nothing is close)."""
    hint = suggest(name, candidates)
    return f"; did you mean '{hint}'?" if hint else ""


def method(tensor, attr: str) -> Method | None:
    if attr not in METHODS:
        return None
    op_name, varargs = METHODS[attr]
    return Method(table()[op_name], tensor, attr, varargs)


def tensor_property(cg, tensor, attr: str):
    if attr not in PROPERTIES:
        return None
    return call(cg, table()[PROPERTIES[attr]], [tensor], {})


def tensor_attributes() -> list[str]:
    return sorted([*METHODS, *PROPERTIES])


# ----------------------------------------------------------------------------------------------
# calling an op: the rules, written once over a builder
# ----------------------------------------------------------------------------------------------
class Builder(typing.Protocol):
    """What the operator rules ask of the values they work on, and how they make new ones. The
    rules are written once; the compiler's builder (RelaxBuilder) reads Relax types and emits Relax,
    the eager reference's (eager_ops.TorchBuilder) reads and computes torch tensors, as Triton's
    interpreter runs its semantic layer with a builder of numpy values."""
    half_in_float32: frozenset  # ops whose half operands it computes in float32 itself (beyond VIA_FLOAT32)

    def is_tensor(self, value) -> bool: ...
    def dtype(self, value) -> str: ...          # a tensor's dtype name
    def shape(self, value) -> tuple: ...        # ints, symbolic sizes where the builder has them
    def ndim(self, value) -> int: ...           # -1: unknown
    def describe(self, value) -> str: ...       # "a float32 tensor of shape (2, 3)", "str 'a'"
    def is_weak(self, value) -> bool: ...       # a Python number, or a 0-d tensor standing for one
    def promotion_operand(self, value): ...     # what the value is to torch's promotion
    def weak(self, result): ...                 # the result of an op on numbers only, marked weak
    def symbolic(self, name: str): ...          # the size a name in bt.Tensor(("n", ...)) stands for
    def operand(self, value): ...               # the value, checked to take part in arithmetic
    def const(self, value, dtype: str): ...     # a Python number as a 0-d tensor
    def as_tensor(self, value, dtype: str): ... # a tensor or number as a tensor of `dtype`
    def index(self, value): ...                 # ints (nested lists) as an int64 tensor
    def dtype_value(self, name: str): ...       # a dtype as the op takes it
    def scalar(self, value, dtype: str | None): ...  # a compile-time number for a tensor of `dtype`
    def sequence(self, value): ...              # (nested) tuples/lists as the op takes them
    def device(self, value=None): ...           # where a tensor lives (None: the code being built), a torch.device
    def stop_gradient(self, value): ...         # the value, through which no gradient flows (x.detach())
    def is_run_time(self, value) -> bool: ...   # a value known only when the code runs
    def is_tensors(self, value) -> bool: ...    # one value the op takes for its tuple of tensors as it is
    def aligned(self, *operands) -> list: ...   # element-wise operands made to agree on their shapes
    def check_sizes(self, op: "Op", values: dict) -> None: ...  # size checks it makes before the op
    def same_as_operator(self, name: str, x1, x2): ...  # `x1 @ x2`, `x1 ** x2`
    def as_operator(self, name: str, x1, x2): ...  # `multiply(x, 0.1)` as `x * 0.1` builds it, or None
    def emit(self, op: "Op", values: dict): ... # the op on its converted arguments
    def rounded_back(self, result, dtype: str): ...  # float32 results of half operands, back to `dtype`
    # what Python's operators build, once codegen.semantic has checked their operands
    def promote(self, x1, x2) -> str: ...      # the dtype two operands combine to (weak ones as numbers)
    def logical(self, symbol: str, x1, x2): ... # element-wise `and`/`or` of bool tensors and Python bools
    def logical_not(self, value): ...          # of a bool tensor
    def bitwise_not(self, value): ...          # of an integer tensor
    def select(self, cond, x1, x2, dtype: str): ...  # element-wise `x1 if cond else x2`, in `dtype`


def call_method(cg, bound: Method, args: list, kwargs: dict):
    return call(cg, bound.op, method_arguments(bound, args, kwargs), kwargs)


def method_arguments(bound: Method, args: list, kwargs: dict) -> list:
    """A method call's arguments as the op takes them: the tensor first."""
    if bound.varargs and len(args) > 1 and all(_is_size(a) for a in args) and bound.varargs not in kwargs:
        args = [tuple(args)]  # x.reshape(2, 3) == x.reshape((2, 3))
    return [bound.tensor, *args]


def call(cg, op: Op, args: list, kwargs: dict):
    """`op(*args, **kwargs)` in compiled code: the rules of `apply`, emitted as Relax."""
    return apply(RelaxBuilder(cg), op, args, kwargs)


def apply(b: Builder, op: Op, args: list, kwargs: dict):
    """Check the arguments against the op's signature, convert them, make the op with `b`."""
    arguments = bind(op, args, kwargs)
    operands = [v for n, v in arguments.items() if op.kinds.get(n) in TENSOR_KINDS and b.is_tensor(v)]
    result = _call(b, op, arguments)
    if on_numbers_only(op, operands, b.is_weak) and b.is_tensor(result):
        result = b.weak(result)  # `abs(s) + 1` on a run-time scalar is still a Python number
    return result


def on_numbers_only(op: Op, operands: list, is_weak) -> bool:
    """An element-wise op whose tensor operands are all run-time scalars (weak 0-d tensors): its
    result is a Python number too, as `abs(s)` is in Python (the compiler and eager both ask)."""
    return op.fn.__module__ in (BINARY_MODULE, UNARY_MODULE) and bool(operands) and all(map(is_weak, operands))


def _call(b: Builder, op: Op, arguments: dict):
    if op.name in SAME_AS_OPERATOR and set(arguments) == {"x1", "x2"}:
        return b.same_as_operator(op.name, arguments["x1"], arguments["x2"])
    values = {name: convert(b, op, name, value, arguments) for name, value in arguments.items()}
    if op.name in AS_OPERATOR and set(values) == {"x1", "x2"}:
        result = b.as_operator(op.name, values["x1"], values["x2"])
        if result is not None:
            return result
    if op.name in ALL_AXES_WHEN_NONE_GIVEN and isinstance(values.get("axis"), (list, tuple)) and not values["axis"]:
        values["axis"] = None
    promoted = [n for n in op.promoted if n in values]
    if promoted:
        dtype = common_dtype([b.promotion_operand(values[n]) for n in promoted])
        for n in promoted:
            values[n] = b.as_tensor(values[n], dtype)
    else:
        dtype = common_dtype([b.promotion_operand(v) for n, v in values.items() if op.kinds[n] in TENSOR_KINDS])
        # a run-time scalar (a Python number's stand-in) made a tensor by an op of one tensor operand
        # becomes one as a number does (element-wise ops keep it a number; several operands promote
        # it): `reshape(s, (1,))` of a float is float32, as torch.as_tensor(s) is, not float64
        numbers_kept = op.fn.__module__ in (BINARY_MODULE, UNARY_MODULE) or op.name in ELEMENTWISE or \
            sum(op.kinds[n] in TENSOR_KINDS for n in values) != 1
        for name, value in values.items():
            if op.kinds[name] in TENSOR_KINDS and core.is_python_scalar(value):
                values[name] = b.const(value, dtype)
            elif op.kinds[name] in TENSOR_KINDS and not numbers_kept and b.is_tensor(value) and b.is_weak(value):
                values[name] = b.as_tensor(value, dtype)
    if op.fn.__module__ == BINARY_MODULE or op.name in ELEMENTWISE:
        operands = [n for n in values if op.kinds[n] in TENSOR_KINDS and b.is_tensor(values[n])]
        values.update(zip(operands, b.aligned(*[values[n] for n in operands])))
    as_int8 = _widen_bools_and_ints(b, op, values)
    check_axis(b, op, values)
    b.check_sizes(op, values)
    narrow = _via_float32(b, op, values)
    result = b.emit(op, values)
    if as_int8 and b.is_tensor(result) and b.dtype(result) == "int8":
        result = b.as_tensor(result, "bool")
    if narrow:
        result = b.rounded_back(result, narrow)
    return result


class RelaxBuilder:
    """The compiler's builder: values are Relax expressions, read through their types; new ones are
    emitted by the code generator `cg`."""
    half_in_float32 = frozenset()  # computed in float32 inside the kernel by legalize.HALF_IN_FLOAT32

    def __init__(self, cg):
        self.cg = cg

    def is_tensor(self, value) -> bool:
        return core.is_tensor(value)

    def dtype(self, value) -> str:
        return core.dtype_of(value)

    def shape(self, value) -> tuple:
        return core.shape_of(value)

    def ndim(self, value) -> int:
        return value.ty.ndim

    def describe(self, value) -> str:
        return core.describe(value)

    def is_weak(self, value) -> bool:
        return self.cg.is_weak(value)

    def promotion_operand(self, value):
        return self.cg.promotion_operand(value)

    def weak(self, result):
        self.cg.weak.append(result)
        return result

    def symbolic(self, name: str):
        return self.cg.symbolic(name)

    def operand(self, value):
        return self.cg.operand(value)

    def const(self, value, dtype: str):
        return self.cg.const(value, dtype)

    def as_tensor(self, value, dtype: str):
        return self.cg.as_tensor(value, dtype)

    def index(self, value):
        return relax.const(np.array(value, dtype="int64"))

    def dtype_value(self, name: str):
        return name

    def scalar(self, value, dtype: str | None):
        return value if dtype is None else tvm.tirx.const(value, dtype)

    def sequence(self, value):
        return _to_lists(value)

    def is_run_time(self, value) -> bool:
        return core.is_tensor(value) or isinstance(value, relax.Expr) and not core.is_symbolic(value)

    def stop_gradient(self, value):
        """`no_grad(x)`: Gradient sends it no adjoint; the forward pipeline reads it as x (shifts.attach)."""
        return self.cg.emit(relax.op.grad.no_grad(value))

    def device(self, value=None) -> torch.device:
        """Where `value` lives, or the code being built runs (a device block's device inside one), as torch
        names it: a GPU with the index its tensor arguments have (this version is theirs), as `x.device` says."""
        cg = self.cg
        kind = cg.options.device_kind
        if cg.placement is not None:
            kind = (value is not None and cg.placement.device_of(value)) or cg.placement.current
        if kind != "cuda":
            return torch.device(kind)
        index = next((int(s.device.split(":")[1]) for s in cg.specs.values()
                      if str(getattr(s, "device", "")).startswith("cuda:")), None)
        return torch.device("cuda") if index is None else torch.device("cuda", index)

    def is_tensors(self, value) -> bool:  # a Relax tuple (or a tensor, which TVM then judges)
        return core.is_tensor(value) or isinstance(value, relax.Expr) and isinstance(value.ty, relax.TupleType)

    def aligned(self, *operands) -> list:
        return self.cg.aligned(*operands)

    def check_sizes(self, op: Op, values: dict) -> None:
        if op.name == "strided_slice":
            _empty_slices(values)
            _clamped_slices(values)
        check_nonempty(self.cg, op, values)

    def same_as_operator(self, name: str, x1, x2):
        return SAME_AS_OPERATOR[name](self.cg, x1, x2)

    def as_operator(self, name: str, x1, x2):
        """The operator's rule for a half tensor and a number (codegen's half_with_number), else None."""
        kind = AS_OPERATOR[name]
        sym = operators.SYMBOL[kind]
        return self.cg.half_with_number(kind, sym, x1, x2, self.cg.operator_dtype(sym, x1, x2))

    def emit(self, op: Op, values: dict):
        cg = self.cg
        row = op.name in AS_ROW and _first_tensor(self, op, values).ty.ndim == 1
        if row:
            first = _first_tensor_name(self, op, values)
            values[first] = cg.emit(relax.op.expand_dims(values[first], 0))
        try:
            result = _scan(cg, op, values) if op.name in SCANS else _sort(cg, op, values) if op.name in SORTS \
                else _reshape(cg, values) if op.name == "reshape" else cg.emit(op.fn(**values))
        except Diagnostic:
            raise
        except Exception as e:  # noqa: BLE001 - TVM's type inference raises several types
            raise Diagnostic(rejected(op, e, values)) from None
        if not isinstance(result.ty, (relax.TensorType, relax.TupleType)):
            raise Diagnostic(f"{op.name}() does not compute a tensor, so it cannot be used in @jit code")
        return cg.emit(relax.op.squeeze(result, [0])) if row else result

    def rounded_back(self, result, dtype: str):
        if core.is_tensor(result):
            return self.cg.emit(relax.op.astype(result, dtype)) if core.dtype_of(result) == "float32" else result
        items = [self.cg.emit(relax.TupleGetItem(result, i)) for i in range(len(result.ty.fields))]
        return tuple(self.rounded_back(item, dtype) for item in items)

    def promote(self, x1, x2) -> str:
        return self.cg.promote(x1, x2)

    def logical(self, symbol: str, x1, x2):
        fn = relax.op.logical_and if symbol == "and" else relax.op.logical_or
        return self.cg.emit_binary(fn, x1, x2, "bool", symbol)

    def logical_not(self, value):
        return self.cg.emit(relax.op.logical_not(value))

    def bitwise_not(self, value):
        return self.cg.emit(relax.op.bitwise_not(value))

    def select(self, cond, x1, x2, dtype: str):
        cg = self.cg
        if dtype == "bool":  # bools select as int8 (see BOOL_AS_INT8)
            chosen = relax.op.where(*cg.aligned(cond, cg.as_tensor(x1, "int8"), cg.as_tensor(x2, "int8")))
            return cg.emit(relax.op.astype(cg.emit(chosen), "bool"))
        return cg.emit(relax.op.where(*cg.aligned(cond, cg.as_tensor(x1, dtype), cg.as_tensor(x2, dtype))))


SCANS = {"cumsum", "cumprod"}


def _scan(cg, op: Op, values: dict):
    """cumsum/cumprod. TVM's scan kernel stores its first element before it looks at the axis's size,
    past the end of an empty result (a segfault, or corrupted memory): over a symbolic size, which may
    be 0, the axis gets one more element, and the result is cut back to the size. A statically empty
    tensor has nothing to scan: its result is an empty tensor of the result's dtype."""
    x, axis = values["data"], values.get("axis")
    if core.shape_of(x) and None in core.shape_of(x):
        return cg.emit(op.fn(**values))
    if axis is None:  # over the flattened tensor, as Relax means it
        x, axis = cg.emit(relax.op.reshape(x, [-1])), 0
    shape = list(core.shape_of(x))
    axis %= len(shape)
    if any(isinstance(d, int) and d == 0 for d in shape):  # statically empty: nothing to scan (TVM's
        # scan kernels, padded or not, divide by the empty size as they are built)
        return cg.emit(relax.op.zeros(relax.ShapeExpr(shape), str(values.get("dtype") or core.dtype_of(x))))
    if isinstance(shape[axis], int):
        return cg.emit(op.fn(**{**values, "data": x, "axis": axis}))
    pad = cg.emit(relax.op.zeros(relax.ShapeExpr(shape[:axis] + [1] + shape[axis + 1:]), core.dtype_of(x)))
    padded = cg.emit(relax.op.concat([x, pad], axis=axis))
    scanned = cg.emit(op.fn(**{**values, "data": padded, "axis": axis}))
    return cg.emit(relax.op.strided_slice(scanned, [axis], [0], [shape[axis]], assume_inbound=True))


def _reshape(cg, values: dict):
    """reshape as torch reads its sizes, which Relax reads otherwise: 0 is a size 0 (Relax copies the
    input's size there), and one -1 is what the other sizes leave, an error where they multiply to 0
    (any size would do). Counts known only at run time are checked then (TVM reads past the input)."""
    x, sizes = values["x"], list(values["shape"])
    shape = core.shape_of(x)
    if None in shape:  # sizes unknown until run time (data-dependent): Relax's reading
        return cg.emit(relax.op.reshape(x, sizes))
    text = f"[{', '.join(str(s) for s in sizes)}]"
    for i, size in enumerate(sizes):
        if isinstance(size, int) and size < -1:
            raise Diagnostic(f"reshape(): invalid shape dimension {size} at index {i} of shape {text}")
    inferred = [i for i, size in enumerate(sizes) if isinstance(size, int) and size == -1]
    if len(inferred) > 1:
        raise Diagnostic(f"reshape(): only one dimension can be inferred, got shape {text}")
    given = [s for i, s in enumerate(sizes) if i not in inferred]
    numel, known = math.prod(shape), math.prod(given)
    invalid = f"reshape(): shape '{text}' is invalid for input of size {{}}"
    ambiguous = (f"reshape(): cannot reshape tensor of {{}} elements into shape {text} because the "
                 "unspecified dimension size -1 can be any value and is ambiguous")
    if isinstance(numel, int) and isinstance(known, int):
        if inferred and known == 0 == numel:
            raise Diagnostic(ambiguous.format(numel))
        if (numel % known if inferred and known else numel != known):
            raise Diagnostic(invalid.format(numel))
        if inferred:
            sizes[inferred[0]] = numel // known
        return cg.emit(relax.Call(tvm.ir.Op.get("relax.reshape"), [x, relax.ShapeExpr(sizes)]))
    zero = _as_size(0)
    analyzer = tvm.sym.Analyzer()
    with analyzer.constraint_scope(tvm.tirx.all(*[s >= 0 for s in [*shape, *given] if not isinstance(s, int)])):
        for size in given:
            if not isinstance(size, int):
                _check_sizes(cg, analyzer, size >= 0, "reshape(): invalid shape dimension {}", size)
        if not inferred:
            _check_sizes(cg, analyzer, tvm.tirx.EQ(_as_size(numel), _as_size(known)), invalid, numel)
            return cg.emit(relax.Call(tvm.ir.Op.get("relax.reshape"), [x, relax.ShapeExpr(sizes)]))
        known, numel = _as_size(known), _as_size(numel)
        _check_sizes(cg, analyzer, tvm.tirx.Or(tvm.tirx.NE(known, zero), tvm.tirx.EQ(numel, zero)), invalid, numel)
        _check_sizes(cg, analyzer, tvm.tirx.NE(known, zero), ambiguous, numel)
        factors = [s for s in given if not isinstance(s, int)]
        with analyzer.constraint_scope(tvm.tirx.all(*[f > 0 for f in factors]) if factors else tvm.tirx.const(True)):
            divisor = tvm.tirx.max(known, _as_size(1))  # no division by 0 before the checks
            _check_sizes(cg, analyzer, tvm.tirx.EQ(tvm.tirx.floormod(numel, divisor), zero), invalid, numel)
            sizes[inferred[0]] = analyzer.simplify(tvm.tirx.floordiv(numel, divisor))
    return cg.emit(relax.Call(tvm.ir.Op.get("relax.reshape"), [x, relax.ShapeExpr(sizes)]))


def _check_sizes(cg, analyzer, condition, message: str, value) -> None:
    """A check of symbolic sizes: an error now if it fails whatever the sizes, nothing if it always
    holds, else made when the code runs (`message`'s {} is `value` then)."""
    condition = analyzer.simplify(condition)
    if analyzer.can_prove(tvm.tirx.Not(condition)):
        raise Diagnostic(message.format(re.sub(r"T\.int64\((-?\d+)\)", r"\1", str(value))))
    if not analyzer.can_prove(condition):
        run_time_check(cg, condition, message, value)


def _as_size(value):
    return tvm.tirx.const(value, "int64") if isinstance(value, int) else value


def run_time_check(cg, condition, message: str, *values) -> None:
    """Emit a check of `condition` (over symbolic sizes, or a 0-d bool tensor on the CPU) made when
    the compiled code runs: false, it raises `message`, its `{}` filled with `values` of that call,
    naming the user's line."""
    source = cg.parsed.source_map
    where = f" (line {source.file_line(cg.lineno or 1)} of {os.path.basename(source.filename)})"
    condition = condition if isinstance(condition, relax.Expr) else relax.prim_value(condition)
    cg.emit(relax.op.assert_op(condition, [relax.prim_value(v) for v in values], RUN_TIME_CHECK + message + where))


SORTS = {"sort", "argsort", "topk"}


def _sort(cg, op: Op, values: dict):
    """sort/argsort/topk of floats in torch's order: NaN above every number (last ascending, first
    descending), equal values in their order. TVM's sorts compare with `<`, which a NaN breaks, so
    this is a stable argsort by the value with NaN read as inf, then one by "is NaN"."""
    params = {name: p.default for name, p in op.signature.parameters.items()}
    wanted = values.get("dtype", params.get("dtype")) or "int32"
    if op.name != "sort" and str(wanted) != "int32":
        # TVM's GPU sorts give int64 indices in their input order (the H200 returned 0, 1 for every
        # row of a topk): sorted with int32 indices, then widened
        indices = _sort(cg, op, {**values, "dtype": "int32"})
        return _widened_indices(cg, op, indices, wanted, values.get("ret_type", params.get("ret_type")))
    x = values.get("data", values.get("x"))
    dtype = core.dtype_of(x)
    if not is_float_dtype(dtype) or not core.shape_of(x):
        return cg.emit(op.fn(**values))
    get = lambda name: values.get(name, params.get(name))  # noqa: E731
    axis = get("axis")
    descending = get("largest") if op.name == "topk" else get("descending")
    index_dtype = get("dtype") or "int32"
    nan = cg.emit(relax.op.isnan(x))
    key = cg.emit(relax.op.where(nan, relax.const(float("inf"), dtype), x))
    first = cg.emit(relax.op.argsort(key, axis, descending, index_dtype))
    nan_first = cg.emit(relax.op.gather_elements(cg.emit(relax.op.astype(nan, "int32")), first, axis))
    order = cg.emit(relax.op.gather_elements(
        first, cg.emit(relax.op.argsort(nan_first, axis, descending, index_dtype)), axis))
    if op.name == "argsort":
        return order
    if op.name == "topk":
        order = cg.emit(relax.op.strided_slice(order, [axis], [0], [get("k")], assume_inbound=True))
    result = cg.emit(relax.op.gather_elements(x, order, axis))
    if op.name == "sort":
        return result
    ret_type = get("ret_type")
    return result if ret_type == "values" else order if ret_type == "indices" else cg.emit(relax.Tuple([result, order]))


def _widened_indices(cg, op: Op, result, dtype: str, ret_type: str | None):
    """An argsort's or topk's int32 indices (alone or second of its pair) as `dtype`."""
    if op.name == "argsort" or op.name == "topk" and ret_type == "indices":
        return cg.emit(relax.op.astype(result, dtype))
    if ret_type == "values":
        return result
    values = cg.emit(relax.TupleGetItem(result, 0)) if not isinstance(result, relax.Tuple) else result.fields[0]
    indices = cg.emit(relax.TupleGetItem(result, 1)) if not isinstance(result, relax.Tuple) else result.fields[1]
    return cg.emit(relax.Tuple([values, cg.emit(relax.op.astype(indices, dtype))]))


def _first_tensor_name(b: Builder, op: Op, values: dict) -> str | None:
    return next((n for n, v in values.items() if op.kinds[n] in TENSOR_KINDS and b.is_tensor(v)), None)


def _first_tensor(b: Builder, op: Op, values: dict):
    name = _first_tensor_name(b, op, values)
    return values[name] if name is not None else None


def _empty_slices(values: dict) -> None:
    """A strided_slice that selects nothing on a static axis (`begin=3, end=1`), which TVM fails to
    build: given as 0:0:1, its empty equivalent."""
    x, axes, begin, end = values["x"], values["axes"], values["begin"], values["end"]
    strides = values.get("strides") or [1] * len(axes)
    shape = core.shape_of(x)
    if not all(isinstance(v, int) for v in [*axes, *begin, *end, *strides]):
        return
    for i, axis in enumerate(axes):
        if -len(shape) <= axis < len(shape) and isinstance(shape[axis], int) and strides[i] != 0 \
                and not range(*slice(begin[i], end[i], strides[i]).indices(shape[axis])):
            begin[i], end[i], strides[i] = 0, 0, 1
    if values.get("strides") is not None or any(s != 1 for s in strides):
        values["strides"] = strides


def _clamped_slices(values: dict) -> None:
    """Bounds of a forward slice of a symbolic axis given clamped to 0..size, the end at least the begin:
    TVM sizes `x[1:-1]` of n as `min(max(n - 1, 0), n) - min(1, n)`, -1 for n = 1 (an allocation fails)."""
    x, axes, begin, end = values["x"], values["axes"], values["begin"], values["end"]
    strides = values.get("strides") or [1] * len(axes)
    shape = core.shape_of(x)
    for i, axis in enumerate(axes):
        size = shape[axis] if isinstance(axis, int) and -len(shape) <= axis < len(shape) else None
        bounds = (begin[i], end[i], strides[i])
        if size is None or isinstance(size, int) or not all(isinstance(v, int) for v in bounds) or strides[i] <= 0:
            continue
        first, last = (tvm.tirx.min(tvm.tirx.max(v + size if v < 0 else _as_size(v), _as_size(0)), size)
                       for v in (begin[i], end[i]))
        analyzer = tvm.sym.Analyzer()
        begin[i], end[i] = analyzer.simplify(first), analyzer.simplify(tvm.tirx.max(last, first))


def check_axis(b: Builder, op: Op, values: dict) -> None:
    """An `axis` must name one of the input's axes (for the ops TVM leaves unchecked)."""
    tensor = _first_tensor(b, op, values)
    if tensor is not None and b.ndim(tensor) >= 0:
        problem = axis_problem(op.name, values.get("axis"), b.ndim(tensor))
        if problem:
            raise Diagnostic(problem)


def empty_axis_message(name: str, axis: int, shape: str, in_call: bool) -> str:
    """max/min/argmax/argmin over an axis of size 0: the compiler's and the eager path's words."""
    return (f"{name}(): cannot reduce axis {axis} of a tensor of shape {shape}: it has size 0"
            f"{' in this call' if in_call else ''}, and an empty axis has no {name} (torch raises too)")


def check_nonempty(cg, op: Op, values: dict) -> None:
    """max/min/argmax/argmin of an axis of size 0 fail, as in torch (they have no value to give)."""
    tensor = _first_tensor(RelaxBuilder(cg), op, values)
    if op.name not in NO_IDENTITY or tensor is None or tensor.ty.ndim <= 0:
        return
    shape, axis = core.shape_of(tensor), values.get("axis")
    axes = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    for a in axes:
        if not isinstance(a, int) or not -len(shape) <= a < len(shape):
            continue  # Relax reports a bad axis
        size = shape[a]
        message = empty_axis_message(op.name, a % len(shape), core.format_shape(shape), core.is_symbolic(size))
        if size == 0 and not cg.flow.may_be_skipped():
            raise Diagnostic(message)
        if core.is_symbolic(size) or size == 0:  # an empty axis in code that may not run: checked when it runs
            run_time_check(cg, size != 0 if core.is_symbolic(size) else tvm.tirx.const(False, "bool"), message)


def axis_problem(op_name: str, axis, ndim: int) -> str | None:
    """What is wrong with an op's `axis` for an input of `ndim` axes (None: nothing)."""
    if op_name not in INPUT_AXIS or axis is None:
        return None
    for a in axis if isinstance(axis, (list, tuple)) else [axis]:
        if isinstance(a, int) and not -max(ndim, 1) <= a < max(ndim, 1):
            return (f"{op_name}(): axis {a} is out of range for a {ndim}-d tensor "
                    f"(axes go from {-max(ndim, 1)} to {max(ndim, 1) - 1})")
    return None


def _via_float32(b: Builder, op: Op, values: dict) -> str | None:
    """Put the operands of an op TVM lacks in their half dtype in float32 (and those of the ops the
    builder computes in float32 itself, `b.half_in_float32`); that dtype, if any."""
    operands = [n for n in values if op.kinds[n] in TENSOR_KINDS and b.is_tensor(values[n])]
    allowed = FLOAT_DTYPES_ONLY.get(op.name)
    for n in operands:
        got = b.dtype(values[n])
        if allowed and is_float_dtype(got) and got not in allowed:
            raise Diagnostic(f"{op.name}() takes {', '.join(allowed)} tensors, got {b.describe(values[n])}; "
                             "convert with .astype()")
    narrow = next((b.dtype(values[n]) for n in operands if op.name in VIA_FLOAT32.get(b.dtype(values[n]), ())
                   or op.name in b.half_in_float32 and b.dtype(values[n]) in ("float16", "bfloat16")), None)
    narrow = half_result(narrow, values)
    if narrow:
        for n in operands:
            if b.dtype(values[n]) == narrow:
                values[n] = b.as_tensor(values[n], "float32")
    return narrow


def half_result(narrow: str | None, values: dict) -> str | None:
    """The half dtype an op computed in float32 rounds back to: its operands' (an explicit
    `dtype=` of that half dtype means the same and is dropped); None when `dtype=` asks for another."""
    if narrow is None or values.get("dtype") is None:
        return narrow
    if values["dtype"] in (narrow, DTYPES[narrow]):
        values["dtype"] = None
        return narrow
    return None


def _widen_bools_and_ints(b: Builder, op: Op, values: dict) -> bool:
    """Apply the dtype rules above to the tensor operands, in place; whether bools went in as int8."""
    operands = [n for n in values if op.kinds[n] in TENSOR_KINDS and b.is_tensor(values[n])]
    if op.name in INT64_ACCUMULATE and values.get("dtype") is None:
        for n in operands:
            if not (is_float_dtype(b.dtype(values[n])) or b.dtype(values[n]) == "int64"):
                values[n] = b.as_tensor(values[n], "int64")
        return False
    if op.name in FLOAT_ONLY and not all(is_float_dtype(b.dtype(values[n])) for n in operands):
        raise Diagnostic(f"{op.name}() needs float tensors, got "
                         f"{', '.join(b.describe(values[n]) for n in operands)}; convert with .astype()")
    if op.name in LOGICAL:
        for n in operands:
            values[n] = b.as_tensor(values[n], "bool")
        return False
    if op.name in BITWISE and any(is_float_dtype(b.dtype(values[n])) for n in operands):
        raise Diagnostic(f"{op.name}() needs integer or bool tensors, got "
                         f"{', '.join(b.describe(values[n]) for n in operands)}")
    if op.name in PROMOTED:  # where: bool values select as int8 (the condition stays bool)
        chosen = [n for n in PROMOTED[op.name] if n in values and b.is_tensor(values[n])]
        if chosen and all(b.dtype(values[n]) == "bool" for n in chosen):
            for n in chosen:
                values[n] = b.as_tensor(values[n], "int8")
            return True
        return False
    bools = [n for n in operands if b.dtype(values[n]) == "bool"]
    if not bools:
        return False
    if op.name in BOOL_REFUSED:
        raise Diagnostic(f"{op.name}() on bool tensors is not supported; convert with .astype() first")
    if op.name not in BOOL_AS_INT8:
        return False
    for n in bools:
        values[n] = b.as_tensor(values[n], "int8")
    return True


def bind(op: Op, args: list, kwargs: dict) -> dict:
    params = op.signature.parameters
    renamed = {}
    for key, value in kwargs.items():
        if key not in params and KEYWORD_ALIASES.get(key) in params:
            key = KEYWORD_ALIASES[key]
        if key not in params:
            hint = suggest(key, params)
            raise Diagnostic(f"{op.name}() has no parameter '{key}'" + (f" (did you mean '{hint}'?)" if hint else "")
                             + f"; expected {op.display}")
        if key in renamed:
            raise Diagnostic(f"{op.name}() got '{key}' twice; expected {op.display}")
        renamed[key] = value
    try:
        bound = op.signature.bind(*args, **renamed)
    except TypeError as e:
        raise Diagnostic(f"{op.name}(): {e}; expected {op.display}") from None
    return dict(bound.arguments)


def convert(b: Builder, op: Op, name: str, value, arguments: dict):
    """One argument, checked against its parameter's kind and made into what the op takes (CONVERT by
    kind; a parameter of no kind there takes a compile-time Python value)."""
    return CONVERT.get(op.kinds[name], _convert_python)(b, op, name, value, arguments)


def _where(op: Op, name: str) -> str:
    return f"{op.name}(): argument '{name}'"


def _convert_tensor(b: Builder, op: Op, name: str, value, arguments: dict):
    if value is None and op.kinds[name] == "optional tensor":
        return None
    return b.operand(value)


def _convert_tensors(b: Builder, op: Op, name: str, value, arguments: dict):
    if b.is_tensors(value):
        return value
    if isinstance(value, (tuple, list)) and value and all(b.is_tensor(v) for v in value):
        return list(value)
    raise Diagnostic(f"{_where(op, name)} takes a tuple of tensors, got {b.describe(value)}")


def _convert_index(b: Builder, op: Op, name: str, value, arguments: dict):
    if b.is_tensor(value):
        return value
    if is_index(value):
        return b.index(value)
    raise Diagnostic(f"{_where(op, name)} takes an integer tensor, an int or a list of ints, got {b.describe(value)}")


def _convert_shape(b: Builder, op: Op, name: str, value, arguments: dict):
    kind = op.kinds[name]
    if value is None and kind == "optional shape":
        return None
    sizes = (value,) if _is_size(value) else value
    if isinstance(sizes, (tuple, list)) and all(_is_size(s) for s in sizes):
        return b.sequence(sizes)
    raise Diagnostic(f"{_where(op, name)} takes {'a shape (a tuple of sizes)' if kind == 'shape' and name == 'shape' else 'a tuple of ints'}"
                     f", got {b.describe(value)}")


def _convert_dtype(b: Builder, op: Op, name: str, value, arguments: dict):
    if value is None and op.signature.parameters[name].default is None:
        return None
    try:
        return b.dtype_value(dtype_name(value))
    except ValueError:
        hint = suggest(value, DTYPES) if isinstance(value, str) else None
        raise Diagnostic(f"{_where(op, name)} takes a dtype such as 'float32' or torch.float16, got {value!r}"
                         + (f" (did you mean '{hint}'?)" if hint else "") + f"; supported: {', '.join(DTYPES)}"
                         ) from None


def _convert_scalar(b: Builder, op: Op, name: str, value, arguments: dict):
    where = _where(op, name)
    tensor = next((v for v in arguments.values() if b.is_tensor(v)), None)
    if not core.is_python_scalar(value):
        raise Diagnostic(f"{where} takes a compile-time number, got {b.describe(value)}")
    if tensor is not None and not is_float_dtype(b.dtype(tensor)) \
            and isinstance(value, float) and not value.is_integer():
        raise Diagnostic(f"{where} is {value!r}, which an {b.dtype(tensor)} tensor cannot hold")
    if tensor is not None and is_float_dtype(b.dtype(tensor)) and math.isfinite(value) \
            and abs(value) > torch.finfo(DTYPES[b.dtype(tensor)]).max:  # TVM refuses such a literal
        raise Diagnostic(f"{where} is {value!r}, beyond the largest {b.dtype(tensor)} value "
                         "(torch refuses it too)")
    return b.scalar(value, None if tensor is None else b.dtype(tensor))


def _convert_python(b: Builder, op: Op, name: str, value, arguments: dict):
    """A compile-time Python value, checked against the parameter's annotation."""
    param = op.signature.parameters[name]
    if b.is_run_time(value):
        raise Diagnostic(f"{_where(op, name)} must be a compile-time value ({_type_text(param.annotation)}), "
                         f"got {b.describe(value)}")
    if not _accepts(param.annotation, value):
        raise Diagnostic(f"{_where(op, name)} must be {_type_text(param.annotation)}, got {b.describe(value)}")
    return b.sequence(value)


# A parameter's kind (Op.kinds) -> how `convert` checks and converts its argument.
CONVERT = {"tensor": _convert_tensor, "optional tensor": _convert_tensor, "tensors": _convert_tensors,
           "index": _convert_index, "shape": _convert_shape, "optional shape": _convert_shape,
           "dtype": _convert_dtype, "scalar": _convert_scalar}


def is_index(value) -> bool:
    """A Python int, or a (nested) list or tuple of them: an index given as Python values."""
    if isinstance(value, (list, tuple)):
        return all(is_index(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or core.is_symbolic(value)


def _accepts(annotation, value) -> bool:
    """Whether a compile-time value fits a parameter annotation (Relax ops' annotations only use
    ints, floats, bools, strings, None, lists/tuples of those, and expressions)."""
    if annotation is inspect.Parameter.empty:
        return True
    for option in _options(annotation):
        origin = typing.get_origin(option)
        if option is _NONE and value is None:
            return True
        if option is bool and isinstance(value, bool):
            return True
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if option is str and isinstance(value, str):
            return True
        if isinstance(option, type) and issubclass(option, Expr) and core.is_symbolic(value):
            return True
        if origin in (list, tuple) and isinstance(value, (list, tuple)):
            inner = [a for a in typing.get_args(option) if a is not Ellipsis]
            if all(any(_accepts(a, v) for a in inner) for v in value):
                return True
    return False


def _type_text(annotation) -> str:
    """An annotation in the user's words: `int | list[int] | None` -> "an int, a tuple of ints or None"."""
    words = {int: "an int", float: "a number", bool: "a bool", str: "a string", _NONE: "None"}
    parts = []
    for option in _options(annotation):
        if option in words:
            parts.append(words[option])
        elif typing.get_origin(option) in (list, tuple):
            inner = [a for a in typing.get_args(option) if a is not Ellipsis]
            parts.append("a tuple of " + " or ".join(_plural(a) for a in inner))
        elif isinstance(option, type) and issubclass(option, Expr):
            parts.append("a symbolic size")
        else:
            parts.append(getattr(option, "__name__", str(option)))
    unique = list(dict.fromkeys(parts))
    return unique[0] if len(unique) == 1 else ", ".join(unique[:-1]) + " or " + unique[-1]


def _plural(option) -> str:
    return {int: "ints", float: "numbers", bool: "bools", str: "strings"}.get(
        option, "sizes" if isinstance(option, type) and issubclass(option, Expr) else "values")


def _to_lists(value):
    if isinstance(value, (tuple, list)):
        return [_to_lists(v) for v in value]
    return value


def common_dtype(values: list) -> str:
    """The dtype that numbers and tensors combine to, by torch's promotion: dimensioned tensors
    outrank 0-d tensors, which outrank Python numbers. Bool tensors (conditions) count only when
    nothing else is there. Tensors are Relax tensors, or torch tensors (the eager reference); weak
    0-d tensors (run-time scalars) come as the numbers they stand for (`promotion_operand`)."""
    tensors = [torch.empty((1,) if v.ty.ndim else (), dtype=DTYPES[core.dtype_of(v)]) if core.is_tensor(v)
               else torch.empty((1,) if v.dim() else (), dtype=v.dtype)
               for v in values if core.is_tensor(v) or isinstance(v, torch.Tensor)]
    if any(t.dtype != torch.bool for t in tensors):
        tensors = [t for t in tensors if t.dtype != torch.bool]
    operands = tensors + [v for v in values if core.is_python_scalar(v)]
    if not operands:
        return TORCH_TO_NAME[torch.get_default_dtype()]
    acc = operands[0]
    for value in operands[1:]:
        dtype = torch.result_type(acc, value)
        if isinstance(acc, torch.Tensor) or isinstance(value, torch.Tensor):
            dimensioned = any(isinstance(v, torch.Tensor) and v.dim() for v in (acc, value))
            acc = torch.empty((1,) if dimensioned else (), dtype=dtype)
        else:  # two Python numbers: the higher kind stands for both (bool < int < float)
            acc = max(acc, value, key=lambda v: (isinstance(v, float), not isinstance(v, bool)))
    return TORCH_TO_NAME[acc.dtype if isinstance(acc, torch.Tensor) else torch.result_type(acc, acc)]


# ----------------------------------------------------------------------------------------------
# TVM's complaint, in the user's words
# ----------------------------------------------------------------------------------------------
_REWRITES = [
    (re.compile(r"Check failed: \(.*?\) is false: "), ""),
    (re.compile(r'R\.Tensor\(\(([^()]*)\), dtype="(\w+)"\)'), r"a \2 tensor of shape (\1)"),
    (re.compile(r"R\.shape\(\[([^\[\]]*)\]\)"), r"(\1)"),
    (re.compile(r"T\.u?int\d+\((-?\d+)\)"), r"\1"),
    (re.compile(r"T\.((?:u?int|float|bfloat)\d+|bool)\b"), r"\1"),
]
_INTERNALS = re.compile(r"tvm|relax|tirx|ffi|Traceback|\.cc\b|\bir\.|\bR\.|\bT\.|InternalError", re.I)


def explain(op: Op, exc: Exception) -> str | None:
    """TVM's reason for rejecting a call, rewritten without IR syntax; None if it can't be."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return None
    text = lines[-1]
    text = _strip_op_repr(text, op.name)
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    text = text.strip()
    if not text or _INTERNALS.search(text):
        return None
    return text


def _strip_op_repr(text: str, name: str) -> str:
    """Replace TVM's printed operator object `ir.Op(...)` (nested parentheses) by the op's name."""
    start = text.find("ir.Op(")
    if start < 0:
        return text
    depth, end = 0, start + len("ir.Op")
    for end in range(start + len("ir.Op"), len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    return text[:start] + f"`{name}`" + text[end + 1:]


def rejected(op: Op, exc: Exception, values: dict) -> str:
    reason = explain(op, exc)
    got = ", ".join(f"{k}={_short(v)}" for k, v in values.items())
    message = f"{op.name}() rejected its arguments"
    if reason:
        message += f": {reason}"
    return f"{message} (called as {op.name}({got}); expected {op.display})"


def _short(value) -> str:
    if core.is_tensor(value):
        return f"<{core.dtype_of(value)} tensor {tuple(core.shape_of(value))}>"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, relax.Expr) and not core.is_symbolic(value):
        return f"<{type(value).__name__}>"
    return repr(value) if not core.is_symbolic(value) else str(value)
