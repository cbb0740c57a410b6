"""Element-wise torch functions and methods: math, activations, comparisons, dtype conversions.

Each rule builds its result from the library's Relax ops (`op(b, "exp", x)`), so the compiled code and
the eager reference compute it the same way, with the library's dtype, NaN and half rules. A rule
computes `inplace=True` (F.relu(x, inplace=True)) out of place; the caller (RelaxCodeGen.visit_Call,
eager.torch_function) then writes the result where x lives, as torch does.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...core.errors import Diagnostic
from ...core.types import DTYPES, TORCH_TO_NAME, dtype_name, is_float_dtype
from .. import library
from .registry import op, tensor, tensor_property, torch_rule

HALVES = ("float16", "bfloat16")


SPACE_NAMES = {torch: "torch", torch.Tensor: "Tensor", F: "torch.nn.functional", torch.special: "torch.special"}


def register(*names: str):
    """Register a rule under every torch spelling of each name (torch.X, Tensor.X and the method .X(),
    F.X, torch.special.X, where they exist)."""
    def deco(rule):
        for name in names:
            spaces = [space for space in SPACE_NAMES if hasattr(space, name)]
            functions = list({id(f): f for f in (getattr(space, name) for space in spaces)}.values())
            methods = (name,) if hasattr(torch.Tensor, name) else ()
            torch_rule(*functions, methods=methods, name=f"{SPACE_NAMES[spaces[0]]}.{name}")(rule)
        return rule
    return deco


def default_float() -> str:
    return TORCH_TO_NAME[torch.get_default_dtype()]


def as_float(b, x):
    """x as a float tensor: integer and bool tensors in torch's default dtype (torch.exp(int) is float32)."""
    return x if is_float_dtype(b.dtype(x)) else b.as_tensor(x, default_float())


def in_float32(b, x, compute):
    """compute(x) for a float16/bfloat16 x on its float32 copy, rounded back once, as torch's half
    kernels compute (a formula of several ops would round after each in the half dtype)."""
    if b.dtype(x) not in HALVES:
        return compute(x)
    return b.as_tensor(compute(b.as_tensor(x, "float32")), b.dtype(x))


def dtype_of_result(b, *values) -> str:
    """The dtype torch's promotion gives these operands (tensors, weak scalars, Python numbers)."""
    return library.common_dtype([b.promotion_operand(v) for v in values])


# ----------------------------------------------------------------------------------------------
# unary math
# ----------------------------------------------------------------------------------------------
# torch name -> the library op computing it; integer and bool inputs become float (torch's rule).
FLOAT_UNARY = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan",
    "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
    "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
    "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "sigmoid": "sigmoid", "expit": "sigmoid",
    "erf": "erf",
}
# torch name -> the library op; the dtype stays the input's (bool inputs: SAME_DTYPE_BOOL).
SAME_DTYPE_UNARY = {
    "abs": "abs", "absolute": "abs", "floor": "floor", "ceil": "ceil", "trunc": "trunc", "fix": "trunc",
    "neg": "negative", "negative": "negative", "sign": "sign", "sgn": "sign", "square": "square", "relu": "relu",
}
# What torch does with a bool tensor there: refuse it, or compute in int64 (torch.square(bool) is int64).
SAME_DTYPE_BOOL = {"abs": None, "absolute": None, "neg": None, "negative": None, "relu": None, "positive": None,
                   "square": "int64"}
# torch name -> the library op giving a bool (or, for bitwise_not, the input's dtype).
PREDICATES = {"isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "logical_not": "logical_not",
              "bitwise_not": "bitwise_not"}


def _unary(torch_name: str, relax_name: str, prepare):
    def rule(b, input):
        x = tensor(b, input, f"torch.{torch_name}()")
        return op(b, relax_name, prepare(b, torch_name, x))
    rule.__name__ = torch_name
    rule.__doc__ = f"torch.{torch_name}: the library's {relax_name}."
    return rule


def _float_input(b, name, x):
    return as_float(b, x)


def _same_dtype_input(b, name, x):
    if b.dtype(x) == "bool" and name in SAME_DTYPE_BOOL:
        if SAME_DTYPE_BOOL[name] is None:
            raise Diagnostic(f"torch.{name}() does not take bool tensors (torch refuses them too)")
        return b.as_tensor(x, SAME_DTYPE_BOOL[name])
    return x


def _as_is(b, name, x):
    if name in ("isnan", "isinf") and not is_float_dtype(b.dtype(x)):  # integers are never NaN nor inf
        return as_float(b, x)
    return x


for _table, _prepare in ((FLOAT_UNARY, _float_input), (SAME_DTYPE_UNARY, _same_dtype_input), (PREDICATES, _as_is)):
    for _name, _relax in _table.items():
        register(_name)(_unary(_name, _relax, _prepare))


@register("positive")
def positive(b, input):
    """torch.positive: the input itself (bool refused, as torch does)."""
    return _same_dtype_input(b, "positive", tensor(b, input, "torch.positive()"))


def _expm1(b, x):
    """Kahan's exp(x) - 1 without cancellation: (u - 1) * x / log(u), u = exp(x)'s rounding errors cancel."""
    u = op(b, "exp", x)
    um1 = op(b, "subtract", u, 1.0)
    one = op(b, "equal", u, 1.0)  # |x| tiny: exp(x) rounds to 1, and x / log(u) would be 0 / 0
    minus_one = op(b, "equal", um1, -1.0)  # x very negative (and -inf): log's slope at u = 0 is inf
    # log of 2 where another branch is taken: neither 0 / log(1) nor log's slope at 0 reaches the gradient
    safe = _unless(b, op(b, "logical_or", one, minus_one), u, 2.0)
    r = op(b, "multiply", um1, op(b, "divide", x, op(b, "log", safe)))
    r = op(b, "where", one, x, r)
    r = op(b, "where", minus_one, -1.0, r)
    return op(b, "where", op(b, "equal", u, math.inf), math.inf, r)


def _log1p(b, x):
    """log(1 + x) without cancellation: log(u) * x / (u - 1), u = 1 + x (Goldberg's form)."""
    u = op(b, "add", x, 1.0)
    one = op(b, "equal", u, 1.0)  # |x| below 1's ulp, where x / (u - 1) would be 0 / 0
    r = op(b, "multiply", op(b, "log", u), op(b, "divide", x, _unless(b, one, op(b, "subtract", u, 1.0))))
    r = op(b, "where", one, x, r)
    return op(b, "where", op(b, "equal", u, math.inf), math.inf, r)


def _unless(b, where, value, stand_in: float = 1.0):
    """`value`, a harmless `stand_in` where the formula's other branch is taken: there a 0 / 0 (or an
    infinite slope) would be NaN, and a NaN that `where` leaves out still reaches the gradient (0 times
    NaN): softplus's backward of x below -8.5 (beta 2: exp(2x) rounds 1 + it to 1) was NaN."""
    return op(b, "where", where, stand_in, value)


# torch name -> how it is computed from exact library ops, in float32 for half inputs.
FORMULAS = {
    "expm1": _expm1,
    "log1p": _log1p,
    "exp2": lambda b, x: op(b, "power", 2.0, x),
    "log2": lambda b, x: op(b, "multiply", op(b, "log", x), 1 / math.log(2)),
    "log10": lambda b, x: op(b, "multiply", op(b, "log", x), 1 / math.log(10)),
    "reciprocal": lambda b, x: op(b, "divide", 1.0, x),
    "deg2rad": lambda b, x: op(b, "multiply", x, math.pi / 180),
    "rad2deg": lambda b, x: op(b, "multiply", x, 180 / math.pi),
}


def _formula(torch_name: str, compute):
    def rule(b, input):
        x = as_float(b, tensor(b, input, f"torch.{torch_name}()"))
        return in_float32(b, x, lambda v: compute(b, v))
    rule.__name__ = torch_name
    rule.__doc__ = f"torch.{torch_name}, from exact library ops (Relax has no {torch_name})."
    return rule


for _name, _compute in FORMULAS.items():
    register(_name)(_formula(_name, _compute))


@register("round")
def round_(b, input, *, decimals=0):
    """torch.round: half to even; `decimals` other than 0 is refused (its scaling is inexact)."""
    x = tensor(b, input, "torch.round()")
    if decimals != 0:
        raise Diagnostic(f"torch.round(decimals={decimals!r}) is not supported in @jit code; only decimals=0")
    return x if not is_float_dtype(b.dtype(x)) else op(b, "round", x)


@register("nan_to_num")
def nan_to_num(b, input, nan=0.0, posinf=None, neginf=None):
    """torch.nan_to_num: NaN, +inf, -inf replaced (by default with 0 and the dtype's largest/lowest)."""
    x = tensor(b, input, "torch.nan_to_num()")
    if not is_float_dtype(b.dtype(x)):
        return x
    info = torch.finfo(DTYPES[b.dtype(x)])
    x = op(b, "where", op(b, "isnan", x), b.as_tensor(nan, b.dtype(x)), x)
    x = op(b, "where", op(b, "equal", x, math.inf), b.as_tensor(info.max if posinf is None else posinf, b.dtype(x)), x)
    low = info.min if neginf is None else neginf
    return op(b, "where", op(b, "equal", x, -math.inf), b.as_tensor(low, b.dtype(x)), x)


# ----------------------------------------------------------------------------------------------
# binary arithmetic
# ----------------------------------------------------------------------------------------------
def _scaled(b, other, alpha, where: str):
    """alpha * other, as torch.add(..., alpha=) takes it (a float alpha needs a float operand)."""
    if alpha == 1:
        return other
    if isinstance(alpha, float) and not is_float_dtype(dtype_of_result(b, other)):
        raise Diagnostic(f"{where}: for integral input tensors, argument alpha must not be a floating "
                         "point number (torch refuses it too)")
    if b.is_tensor(other):
        return op(b, "multiply", other, alpha)
    return other * alpha


@register("add")
def add(b, input, other, *, alpha=1):
    """torch.add: input + alpha * other, with the `+` operator's promotion."""
    return op(b, "add", tensor(b, input, "torch.add()"), _scaled(b, other, alpha, "torch.add()"))


@register("sub", "subtract")
def sub(b, input, other, *, alpha=1):
    """torch.sub: input - alpha * other, with the `-` operator's promotion."""
    return op(b, "subtract", tensor(b, input, "torch.sub()"), _scaled(b, other, alpha, "torch.sub()"))


@register("mul", "multiply")
def mul(b, input, other):
    """torch.mul: the `*` operator's rule."""
    return op(b, "multiply", tensor(b, input, "torch.mul()"), other)


def _true_divide(b, x, y):
    """x / y as the `/` operator: integers divide as floats of torch's default dtype."""
    if not is_float_dtype(dtype_of_result(b, x, y)):
        x, y = (b.as_tensor(v, default_float()) if b.is_tensor(v) else float(v) for v in (x, y))
    return op(b, "divide", x, y)


def _trunc_divide(b, x, y):
    """Division rounded toward zero: floats trunc(x / y); integers the floored quotient plus one where a
    remainder is left and the signs differ (floor_divide's rule for a zero divisor: an error, as torch)."""
    if is_float_dtype(dtype_of_result(b, x, y)):
        return op(b, "trunc", op(b, "divide", x, y))
    q, r = op(b, "floor_divide", x, y), op(b, "floor_mod", x, y)
    signs_differ = op(b, "not_equal", op(b, "less", x, 0), op(b, "less", y, 0))
    return op(b, "where", op(b, "logical_and", op(b, "not_equal", r, 0), signs_differ), op(b, "add", q, 1), q)


ROUNDING_MODES = {None: _true_divide, "trunc": _trunc_divide, "floor": lambda b, x, y: op(b, "floor_divide", x, y)}


@register("div", "divide", "true_divide")
def div(b, input, other, *, rounding_mode=None):
    """torch.div: true division, or rounded toward zero ('trunc') or down ('floor')."""
    if rounding_mode not in ROUNDING_MODES:
        raise Diagnostic(f"torch.div(): rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return ROUNDING_MODES[rounding_mode](b, tensor(b, input, "torch.div()"), other)


# torch name -> the library op (which follows the operator of the same meaning: `//`, `%`, `**`).
BINARY = {
    "floor_divide": "floor_divide", "remainder": "floor_mod", "fmod": "mod", "pow": "power",
    "maximum": "maximum", "minimum": "minimum",
    "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
    "not_equal": "not_equal", "less": "less", "less_equal": "less_equal", "greater": "greater",
    "greater_equal": "greater_equal", "logical_and": "logical_and", "logical_or": "logical_or",
    "logical_xor": "logical_xor", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
}
# Binary ops torch computes in float for integer operands (the library's are float-only).
FLOAT_BINARY = {"atan2": "atan2", "arctan2": "atan2"}


def _binary(torch_name: str, relax_name: str, to_float: bool):
    def rule(b, input, other):
        x = input if torch_name == "pow" else tensor(b, input, f"torch.{torch_name}()")  # pow(2, x)
        if to_float and not is_float_dtype(dtype_of_result(b, x, other)):
            x, other = (as_float(b, v) if b.is_tensor(v) else float(v) for v in (x, other))
        return op(b, relax_name, x, other)
    rule.__name__ = torch_name
    rule.__doc__ = f"torch.{torch_name}: the library's {relax_name}, promoted as torch does."
    return rule


for _table, _to_float in ((BINARY, False), (FLOAT_BINARY, True)):
    for _name, _relax in _table.items():
        register(_name)(_binary(_name, _relax, _to_float))


def _float_pair(b, x, y, compute, where: str):
    """compute(x, y) on the two operands promoted to one float dtype (integers refused, as torch does),
    in float32 for a half dtype and rounded back once."""
    dtype = dtype_of_result(b, x, y)
    if not is_float_dtype(dtype):
        raise Diagnostic(f"{where} takes float tensors, got {b.describe(x)} and {b.describe(y)} "
                         "(torch refuses them too)")
    wide = "float32" if dtype in HALVES else dtype
    return b.as_tensor(compute(b.as_tensor(x, wide), b.as_tensor(y, wide)), dtype)


def _logaddexp(b, v, w):
    """max + log1p(exp(-|v - w|)), the distance 0 where v == w (both inf: inf - inf is NaN)."""
    distance = op(b, "where", op(b, "equal", v, w), 0.0, op(b, "abs", op(b, "subtract", v, w)))
    return op(b, "add", op(b, "maximum", v, w), _log1p(b, op(b, "exp", op(b, "negative", distance))))


def _hypot(b, v, w):
    """m * sqrt(1 + (n / m)^2), m and n the larger and smaller magnitude (no overflow of the squares);
    inf where either is inf, NaN or not (C's hypot)."""
    a, c = op(b, "abs", v), op(b, "abs", w)
    m, n = op(b, "maximum", a, c), op(b, "minimum", a, c)
    ratio = op(b, "divide", n, op(b, "where", op(b, "equal", m, 0.0), 1.0, m))  # 0 / 0: 0
    r = op(b, "multiply", m, op(b, "sqrt", op(b, "add", op(b, "multiply", ratio, ratio), 1.0)))
    return op(b, "where", op(b, "logical_or", op(b, "isinf", a), op(b, "isinf", c)), math.inf, r)


@register("logaddexp")
def logaddexp(b, input, other):
    """torch.logaddexp (the library's log_add_exp gives inf for logaddexp(100, -inf) when compiled)."""
    return _float_pair(b, tensor(b, input, "torch.logaddexp()"), other, lambda v, w: _logaddexp(b, v, w),
                       "torch.logaddexp()")


@register("hypot")
def hypot(b, input, other):
    """torch.hypot: sqrt(x^2 + y^2) without overflow."""
    return _float_pair(b, tensor(b, input, "torch.hypot()"), other, lambda v, w: _hypot(b, v, w), "torch.hypot()")


def _ignoring_nan(relax_name: str):
    def rule(b, input, other):
        """torch.fmax/fmin: maximum/minimum where a NaN operand gives the other one."""
        x = tensor(b, input, f"torch.f{relax_name[:3]}()")
        result = op(b, relax_name, x, other)
        if not is_float_dtype(b.dtype(result)):
            return result
        result = op(b, "where", op(b, "isnan", as_float(b, x)), other, result)
        other_nan = op(b, "isnan", b.as_tensor(other, b.dtype(result)))
        return b.as_tensor(op(b, "where", other_nan, x, result), b.dtype(result))
    return rule


register("fmax")(_ignoring_nan("maximum"))
register("fmin")(_ignoring_nan("minimum"))


@register("lerp")
def lerp(b, input, end, weight):
    """torch.lerp with torch's two-sided formula (exact at weight 0 and 1): start + w * (end - start)
    where |w| < 0.5, else end - (end - start) * (1 - w)."""
    x = tensor(b, input, "torch.lerp()")
    _lerp_dtypes(b, x, end, weight)
    diff = op(b, "subtract", end, x)
    low = lambda: op(b, "add", x, op(b, "multiply", diff, weight))  # noqa: E731
    high = lambda: op(b, "subtract", end, op(b, "multiply", diff, op(b, "subtract", 1.0, weight)))  # noqa: E731
    if not b.is_tensor(weight):
        return low() if abs(weight) < 0.5 else high()
    return op(b, "where", op(b, "less", op(b, "abs", weight), 0.5), low(), high())


def _lerp_dtypes(b, x, end, weight) -> None:
    """torch.lerp promotes nothing: `end`, and a `weight` tensor with axes, are tensors of the input's
    floating dtype (a 0-d weight may differ), else torch raises."""
    dtype = b.dtype(x)
    if not is_float_dtype(dtype):
        raise Diagnostic(f"torch.lerp(): not implemented for {dtype} tensors (torch refuses it too)")
    if not b.is_tensor(end):
        raise Diagnostic(f"torch.lerp(): `end` must be a tensor, got the number {end!r} (torch refuses it too)")
    for name, value in (("end", end), ("weight", weight)):
        if b.is_tensor(value) and b.dtype(value) != dtype and (name == "end" or b.ndim(value) != 0):
            raise Diagnostic(f"torch.lerp(): expected dtype {dtype} for `{name}` but got dtype "
                             f"{b.dtype(value)} (torch refuses it too)")


@register("addcmul")
def addcmul(b, input, tensor1, tensor2, *, value=1):
    """torch.addcmul: input + value * tensor1 * tensor2."""
    scaled = _scaled(b, tensor1, value, "torch.addcmul()")  # torch's order: (value * t1) * t2
    return op(b, "add", tensor(b, input, "torch.addcmul()"), op(b, "multiply", scaled, tensor2))


@register("addcdiv")
def addcdiv(b, input, tensor1, tensor2, *, value=1):
    """torch.addcdiv: input + value * tensor1 / tensor2 (integer tensors refused, as torch does)."""
    x = tensor(b, input, "torch.addcdiv()")
    if not is_float_dtype(dtype_of_result(b, tensor1, tensor2)):
        raise Diagnostic("torch.addcdiv(): integer division with addcdiv is not supported (torch refuses it too)")
    return op(b, "add", x, op(b, "divide", _scaled(b, tensor1, value, "torch.addcdiv()"), tensor2))


@register("clamp", "clip")
def clamp(b, input, min=None, max=None):
    """torch.clamp: max(input, min) then min(., max) (numbers or tensors; NaN stays NaN; min > max gives max)."""
    x = tensor(b, input, "torch.clamp()")
    if min is None and max is None:
        raise Diagnostic("torch.clamp(): at least one of 'min' or 'max' must not be None")
    if min is not None:
        x = op(b, "maximum", x, min)
    return x if max is None else op(b, "minimum", x, max)


@register("clamp_min")
def clamp_min(b, input, min):
    """torch.clamp_min."""
    return clamp(b, input, min=min)


@register("clamp_max")
def clamp_max(b, input, max):
    """torch.clamp_max."""
    return clamp(b, input, max=max)


@register("where")
def where(b, condition, input=None, other=None):
    """torch.where(condition, input, other): numbers too; the one-argument form (indices) is refused."""
    cond = tensor(b, condition, "torch.where()")
    if input is None and other is None:
        raise Diagnostic("torch.where(condition) (the indices of nonzero elements) is not supported in @jit "
                         "code: its size depends on the data")
    if b.dtype(cond) != "bool":
        raise Diagnostic(f"torch.where(): expected condition to be a bool tensor, got {b.describe(cond)}")
    return op(b, "where", cond, input, other)


@register("masked_fill")
def masked_fill(b, input, mask, value):
    """torch.masked_fill: value where mask holds, in the input's dtype (value a number or a 0-d tensor)."""
    x = tensor(b, input, "torch.masked_fill()")
    if not b.is_tensor(mask) or b.dtype(mask) != "bool":
        raise Diagnostic(f"torch.masked_fill(): mask must be a bool tensor, got {b.describe(mask)}")
    if b.is_tensor(value) and b.ndim(value) != 0:
        raise Diagnostic("torch.masked_fill() only supports a 0-dimensional value tensor, "
                         f"got {b.describe(value)}")
    return op(b, "where", mask, b.as_tensor(value, b.dtype(x)), x)


# ----------------------------------------------------------------------------------------------
# activations (F.*, torch.*, methods); `inplace` is written back by the caller (see the module's docstring)
# ----------------------------------------------------------------------------------------------
def _activation(name: str, compute, float_only: bool = True):
    def rule(b, input, inplace=False):
        x = tensor(b, input, f"torch.nn.functional.{name}()")
        if float_only and not is_float_dtype(b.dtype(x)):
            raise Diagnostic(f"torch.nn.functional.{name}() takes a float tensor, got {b.describe(x)} "
                             "(torch refuses it too)")
        return compute(b, x)
    rule.__name__ = name
    rule.__doc__ = f"F.{name}, from library ops."
    return rule


def _softplus(b, x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, x itself where beta x > threshold (torch's rule)."""
    scaled = op(b, "multiply", x, beta)
    soft = op(b, "divide", in_float32(b, scaled, lambda v: _log1p(b, op(b, "exp", v))), beta)
    return op(b, "where", op(b, "greater", scaled, threshold), x, soft)


def _elu(b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """scale * (x if x > 0 else alpha * expm1(input_scale * x)), as torch's elu kernel."""
    neg = op(b, "multiply", in_float32(b, op(b, "multiply", x, input_scale), lambda v: _expm1(b, v)), alpha)
    return op(b, "multiply", op(b, "where", op(b, "greater", x, 0), x, neg), scale)


ACTIVATIONS = {
    "relu": lambda b, x: op(b, "relu", x),
    "relu6": lambda b, x: op(b, "relu6", x),
    "silu": lambda b, x: op(b, "silu", x),
    "selu": lambda b, x: op(b, "selu", x),
    "mish": lambda b, x: op(b, "multiply", x, op(b, "tanh", _softplus(b, x))),
    "hardsigmoid": lambda b, x: op(b, "divide", op(b, "relu6", op(b, "add", x, 3)), 6),
    "hardswish": lambda b, x: op(b, "divide", op(b, "multiply", x, op(b, "relu6", op(b, "add", x, 3))), 6),
    "logsigmoid": lambda b, x: op(b, "negative", _softplus(b, op(b, "negative", x))),
    "softsign": lambda b, x: op(b, "divide", x, op(b, "add", op(b, "abs", x), 1)),
    "tanhshrink": lambda b, x: op(b, "subtract", x, op(b, "tanh", x)),
    "sigmoid": lambda b, x: op(b, "sigmoid", as_float(b, x)),
    "tanh": lambda b, x: op(b, "tanh", as_float(b, x)),
}
# Activations torch also computes on integer tensors.
INTEGER_ACTIVATIONS = {"relu", "relu6", "sigmoid", "tanh"}

for _name, _compute in ACTIVATIONS.items():
    _rule = _activation(_name, _compute, _name not in INTEGER_ACTIVATIONS)
    if _name in SAME_DTYPE_UNARY or _name in FLOAT_UNARY:  # torch.relu, x.sigmoid(): the unary rules above
        torch_rule(getattr(F, _name), name=f"torch.nn.functional.{_name}")(_rule)
    else:
        register(_name)(_rule)


@register("gelu")
def gelu(b, input, approximate="none"):
    """F.gelu: exact (erf) or the tanh approximation."""
    x = tensor(b, input, "torch.nn.functional.gelu()")
    if not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"torch.nn.functional.gelu() takes a float tensor, got {b.describe(x)} (torch refuses it too)")
    if approximate not in ("none", "tanh"):
        raise Diagnostic(f"torch.nn.functional.gelu(): approximate must be 'none' or 'tanh', got {approximate!r}")
    return op(b, "gelu" if approximate == "none" else "gelu_tanh", x)


@register("softplus")
def softplus(b, input, beta=1.0, threshold=20.0):
    """F.softplus(input, beta, threshold), as torch's."""
    return _softplus(b, tensor(b, input, "torch.nn.functional.softplus()"), beta, threshold)


@register("elu")
def elu(b, input, alpha=1.0, inplace=False):
    """F.elu and F.celu (celu is elu with its input scaled by 1/alpha)."""
    x = tensor(b, input, "torch.nn.functional.elu()")
    return _elu(b, x, alpha)


@register("celu")
def celu(b, input, alpha=1.0, inplace=False):
    """F.celu: max(0, x) + min(0, alpha * expm1(x / alpha))."""
    if alpha == 0:
        raise Diagnostic("torch.nn.functional.celu(): ZeroDivisionError from alpha=0 (torch refuses it too)")
    return _elu(b, tensor(b, input, "torch.nn.functional.celu()"), alpha, 1.0, 1.0 / alpha)


@register("leaky_relu")
def leaky_relu(b, input, negative_slope=0.01, inplace=False):
    """F.leaky_relu: x where x > 0, else negative_slope * x."""
    x = tensor(b, input, "torch.nn.functional.leaky_relu()")
    return op(b, "where", op(b, "greater", x, 0), x, op(b, "multiply", x, negative_slope))


@register("hardtanh")
def hardtanh(b, input, min_val=-1.0, max_val=1.0, inplace=False):
    """F.hardtanh: the input clamped to [min_val, max_val]."""
    if min_val > max_val:
        raise Diagnostic("torch.nn.functional.hardtanh(): min_val cannot be greater than max_val")
    return clamp(b, tensor(b, input, "torch.nn.functional.hardtanh()"), min_val, max_val)


# ----------------------------------------------------------------------------------------------
# dtype conversions and copies
# ----------------------------------------------------------------------------------------------
# tensor method -> the dtype it converts to
CONVERSIONS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
               "int": "int32", "long": "int64", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}


def _check_memory_format(memory_format, where: str) -> None:
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise Diagnostic(f"{where}: memory_format={memory_format} is not supported in @jit code (tensors "
                         "are compact values)")


# Narrow integer dtypes a float converts to through a wider integer, wrapping as torch's conversion
# does on the CPU (-2.7 -> 254 as uint8); a direct conversion saturates or is undefined (C's
# float-to-int rule). torch goes through int32 from float32 and the half types (2^31 + 773 -> 0 as
# int8), which a CPU converts 8 lanes at a time; from float64 through int64 (2^31 + 773 -> 5 as uint8),
# which AVX2 has no vector conversion for (a float32 quantisation to int8 went scalar that way).
VIA_INT64 = {"uint8", "int8", "int16"}


def convert(b, x, dtype: str):
    """x in `dtype`, converted as torch converts (floats to integers truncate toward zero)."""
    if dtype in VIA_INT64 and is_float_dtype(b.dtype(x)):
        x = b.as_tensor(x, "int64" if b.dtype(x) == "float64" else "int32")
    return b.as_tensor(x, dtype)


def _conversion(method: str, dtype: str):
    def rule(b, input, memory_format=None):
        _check_memory_format(memory_format, f"Tensor.{method}()")
        return convert(b, tensor(b, input, f"Tensor.{method}()"), dtype)
    rule.__name__ = method
    rule.__doc__ = f"Tensor.{method}(): a copy in {dtype} (floats to integers truncate, as torch's)."
    return rule


for _name, _dtype in CONVERSIONS.items():
    torch_rule(getattr(torch.Tensor, _name), methods=(_name,), name=f"Tensor.{_name}")(_conversion(_name, _dtype))


def _as_dtype(value, where: str) -> str | None:
    """A dtype argument's name (torch.float16, 'float16'), or None when value is no dtype."""
    if isinstance(value, torch.dtype) or isinstance(value, str) and value in DTYPES:
        try:
            return dtype_name(value)
        except ValueError as e:
            raise Diagnostic(f"{where}: {e}") from None
    return None


def device_of(b, x) -> torch.device:
    """Where x lives, as `x.device` says (creation.py's rule: the function's device, or a block's)."""
    return tensor_property(b, x, "device")[1]


def _check_device(b, x, device, where: str) -> None:
    """A device argument must name where x already is: @jit code moves no data between devices."""
    try:
        target = torch.device(device)
    except (TypeError, RuntimeError):
        raise Diagnostic(f"{where}: expected a dtype, a device or a tensor, got {b.describe(device)}") from None
    own = device_of(b, x)
    if target.type != own.type or target.index is not None and own.index is not None and target.index != own.index:
        raise Diagnostic(f"{where}: cannot move a tensor on {own} to {str(target)!r} in @jit code; "
                         "move the arguments before the call (or use `with bt.device(...)`)")


@torch_rule(torch.Tensor.to, methods=("to",), name="Tensor.to")
def to(b, input, *args, dtype=None, device=None, non_blocking=False, copy=False, memory_format=None):
    """x.to(dtype), x.to(device[, dtype]), x.to(other): a dtype conversion; the device must be x's own."""
    x = tensor(b, input, "Tensor.to()")
    _check_memory_format(memory_format, "Tensor.to()")
    for arg in args:
        if b.is_tensor(arg):  # x.to(other): other's dtype, other's device
            dtype = dtype or b.dtype(arg)
        elif _as_dtype(arg, "Tensor.to()") is not None:
            dtype = _as_dtype(arg, "Tensor.to()")
        elif arg is not None and not isinstance(arg, bool):
            _check_device(b, x, arg, "Tensor.to()")
    if device is not None:
        _check_device(b, x, device, "Tensor.to()")
    if dtype is None:
        return x
    return convert(b, x, _as_dtype(dtype, "Tensor.to()") or dtype_name(dtype))


@torch_rule(torch.Tensor.type, methods=("type",), name="Tensor.type")
def type_(b, input, dtype=None, non_blocking=False):
    """x.type(dtype): a conversion; x.type() is torch's type string ('torch.FloatTensor')."""
    x = tensor(b, input, "Tensor.type()")
    if dtype is None:
        name = torch.empty(0, dtype=DTYPES[b.dtype(x)]).type()  # 'torch.FloatTensor'
        return name.replace("torch.", "torch.cuda.") if device_of(b, x).type == "cuda" else name
    name = _as_dtype(dtype, "Tensor.type()")
    if name is None:
        raise Diagnostic(f"Tensor.type(): expected a dtype such as torch.float16, got {b.describe(dtype)}")
    return convert(b, x, name)


@torch_rule(torch.Tensor.type_as, methods=("type_as",), name="Tensor.type_as")
def type_as(b, input, other):
    """x.type_as(other): x in other's dtype."""
    return convert(b, tensor(b, input, "Tensor.type_as()"), b.dtype(tensor(b, other, "Tensor.type_as()")))


@torch_rule(torch.clone, torch.Tensor.clone, methods=("clone",))
def clone(b, input, *, memory_format=None):
    """torch.clone: a new tensor of the same values (one that in-place updates can tell apart from the
    input: codegen.mutation rebinds every name of the updated tensor), free where it fuses."""
    _check_memory_format(memory_format, "torch.clone()")
    x = tensor(b, input, "torch.clone()")
    return op(b, "where", op(b, "ones_like", x, "bool"), x, x)


@torch_rule(torch.detach, torch.Tensor.detach, methods=("detach",))
def detach(b, input):
    """Tensor.detach: the value, through which no gradient flows (a straight-through estimator's
    `x + (q - x).detach()`)."""
    return b.stop_gradient(tensor(b, input, "Tensor.detach()"))
