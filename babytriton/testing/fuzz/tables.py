"""The generator's tables: literals, @jit helpers, library math with its domains and error
bounds, operation weights, shape sizes."""
from __future__ import annotations

import math

from .values import V


INT_LITERALS = (0, 1, 2, 3, -1, -2)
FLOAT_LITERALS = (0.5, 1.5, -0.25, 2.0, 0.75, -1.5)

def as_argument(v: V) -> V:
    """A value as a @jit callee's unannotated parameter sees it: numbers become weak 0-d tensors."""
    if not v.py:
        return v
    dtype = {"bool": "bool", "int": "int64", "float": "float64"}[v.dtype]
    return V(v.code, dtype, (), v.mag, v.gran, v.exact, v.err, weak=True)


def _mul_add(a: V, b: V):
    return a.mag * b.mag + a.mag, a.gran + b.gran, a.exact and b.exact, a.mag * b.err + b.mag * a.err + a.err


def _max_sub(a: V, b: V):
    return a.mag + 2 * b.mag, max(a.gran, b.gran), a.exact and b.exact, a.err + 2 * b.err


def _select(a: V, b: V):
    if not (a.exact and b.exact):
        return None  # the comparison must not flip
    return max(a.mag, b.mag), max(a.gran, b.gran), True, 0.0


# @jit functions a program may call: name -> (body, model of the result: mag, gran, exact, err)
HELPERS = {
    "mul_add": ("a * b + a", _mul_add),
    "max_sub": ("maximum(a, b) - b", _max_sub),
    "select": ("where(a > b, a, b)", _select),
}

# name -> (argument rule, |derivative| bound, ulps of error)
UNARY_FLOAT = {
    "exp": ("any", 0, 4), "log": ("at-least-1", 1, 4), "sqrt": ("at-least-1", 0.5, 2), "rsqrt": ("at-least-1", 0.5, 4),
    "tanh": ("any", 1, 4), "sigmoid": ("any", 0.25, 4), "sin": ("any", 1, 4), "cos": ("any", 1, 4),
    "erf": ("any", 1.2, 16), "gelu": ("any", 1.2, 16), "silu": ("any", 1.1, 4),
}
# torch-spelled math: name -> (domain (DOMAINS), |derivative| bound over it (None: the result's bound;
# "exact": exact where its input is), the result's bound from the argument's, ulps, spellings)
_T, _M, _F = "torch.{n}({x})", "{x}.{n}()", "torch.nn.functional.{n}({x})"


def _spellings(name: str, *forms: str) -> tuple:
    return tuple(f.replace("{n}", name) for f in forms)


def _math_table() -> dict:
    one, lin, log1 = (lambda m: 1.0), (lambda m: m + 1), (lambda m: math.log(m + 1) + 1)
    rows = {
        "exp": ("small", None, math.exp, 4, _T, _M), "expm1": ("small", None, math.exp, 4, _T, _M),
        "exp2": ("small", None, lambda m: 2 ** m, 4, _T, _M),
        "log": ("pos", 1, log1, 4, _T, _M), "log2": ("pos", 1.5, lambda m: math.log2(m + 1) + 1, 4, _T, _M),
        "log10": ("pos", 0.5, log1, 4, _T, _M), "log1p": ("nonneg", 1, log1, 4, _T, _M),
        "sqrt": ("pos", 0.5, lambda m: math.sqrt(m + 1), 2, _T, _M), "rsqrt": ("pos", 0.5, one, 4, _T, _M),
        "reciprocal": ("pos", 1, one, 2, _T, _M),
        "sin": ("any", 1, one, 4, _T, _M), "cos": ("any", 1, one, 4, _T, _M),
        "tan": ("unit", 2.5, lambda m: 1.2, 8, _T, _M), "asin": ("unit", 2.1, lambda m: 1.1, 8, _T, _M),
        "acos": ("unit", 2.1, lambda m: 2.7, 8, _T, _M), "atan": ("any", 1, lambda m: 1.6, 4, _T, _M),
        "atanh": ("unit", 4.3, lambda m: 1.4, 8, _T, _M), "sinh": ("small", None, lambda m: math.cosh(m), 8, _T, _M),
        "cosh": ("small", None, lambda m: math.cosh(m), 8, _T, _M),
        "asinh": ("any", 1, lambda m: math.asinh(m) + 1, 8, _T, _M),
        "acosh": ("pos1.5", 0.9, lambda m: math.acosh(m) + 1, 8, _T, _M),
        "tanh": ("any", 1, one, 4, _T, _M, _F), "sigmoid": ("any", 0.25, one, 4, _T, _M, _F),
        "erf": ("any", 1.2, one, 16, _T, _M), "deg2rad": ("any", 0.02, lambda m: m * 0.02, 2, _T, _M),
        "rad2deg": ("any", 57.3, lambda m: m * 57.3, 2, _T, _M),
        "elu": ("any", 1, lin, 8, _F), "celu": ("any", 1, lin, 8, _F), "selu": ("any", 1.76, lambda m: 1.06 * m + 2, 8, _F),
        "gelu": ("any", 1.2, lin, 16, _F, "torch.nn.functional.gelu({x}, approximate='tanh')"),
        "silu": ("any", 1.1, lin, 8, _F), "mish": ("any", 1.1, lin, 16, _F), "softplus": ("any", 1, lin, 8, _F),
        "logsigmoid": ("any", 1, lin, 8, _F), "softsign": ("any", 1, one, 4, _F),
        "hardsigmoid": ("any", 0.17, one, 4, _F), "hardswish": ("any", 1.5, lin, 8, _F),
        "tanhshrink": ("any", 1, lin, 8, _F), "hardtanh": ("any", "exact", lambda m: min(m, 1.0), 0, _F),
        "nan_to_num": ("any", "exact", lambda m: max(m, 1.0), 0,
                       "torch.nan_to_num({x}, nan=0.0, posinf=1.0, neginf=-1.0)"),
    }
    return {name: (*row[:4], _spellings(name, *row[4:])) for name, row in rows.items()}


TORCH_MATH = _math_table()
# the argument each domain gives: where the function and its derivative are bounded
DOMAINS = {"any": "{x}", "small": "{x}", "pos": "abs({x}) + 1", "pos1.5": "abs({x}) + 1.5", "nonneg": "abs({x})",
           "unit": "torch.clamp({x}, -0.875, 0.875)"}
DOMAIN_LIMIT = {"small": 5}   # exp-like: the argument's bound (exp(5) fits every float dtype)
# torch.X of an integer tensor computes in float32 (torch's rule); the rest take a float tensor
INT_TO_FLOAT = {"exp", "expm1", "exp2", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                "atan", "sinh", "cosh", "asinh", "acosh", "tanh", "sigmoid", "erf"}
BT_OPS = {"abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "floor", "ceil", "round",
          "sign", "negative", "square", "maximum", "minimum", "where", "clip", "sum", "mean", "max", "min", "prod",
          "argmax", "argmin", "relu", "gelu", "silu", "softmax", "log_softmax", "astype"}
OPS = [("call_helper", 1), ("arith", 10), ("divide", 3), ("floor_div_mod", 3), ("power", 2), ("negate", 1), ("compare", 4),
       ("logical", 2), ("bitwise", 2), ("ifexp", 3), ("compile_time_branch", 1), ("unary_float", 6),
       ("unary_exact", 3), ("binary_op", 2), ("reduction", 6), ("softmax", 2), ("astype", 3), ("matmul", 2),
       ("shape_op", 4), ("library_misc", 3), ("torch_math", 6), ("binary_math", 2)]



LONG_SHARE = 0.05  # programs that reduce 4096 to 100000 half-precision elements
# programs over wide shapes (a GPU kernel's vectors, warps and blocks; ragged tails): their sizes
WIDE_SHARE = 0.25
WIDE_INNER = (32, 64, 96, 100, 128, 250, 256, 257, 512, 1000, 1024, 2052, 4104)
WIDE_OUTER = (1, 2, 3, 4, 8, 16, 33, 64)
WIDE_ELEMENTS = 1 << 17
MATMUL_WORK = 1 << 22  # multiply-adds of a generated matrix product (torch's and the compiled one's run)


def method_keywords(name: str, axis, options: dict) -> dict:
    """A reduction method's keywords spelled one way (a tensor method follows torch where spelled as
    torch): torch's (dim=, keepdim=) where torch's meaning is the library's, else Relax's (axis=,
    keepdims=), as x.max(dim=1) is torch's (values, indices) and torch's prod takes one int dim."""
    torch_means_it = name in ("sum", "mean", "argmax", "argmin") or name == "prod" and isinstance(axis, int)
    torch_spelt = torch_means_it and ("dim" in options or "keepdim" in options)
    names = {"axis": "dim", "keepdims": "keepdim"} if torch_spelt else {"dim": "axis", "keepdim": "keepdims"}
    return {names.get(k, k): v for k, v in options.items()}
