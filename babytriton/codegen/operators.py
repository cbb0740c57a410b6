"""Operator tables: each Python AST operator, its compile-time (Python) meaning, its Relax op and
its TIR (TensorIR backend) form."""
import ast
import math
import operator

import torch
from tvm import relax, tirx

from ..operators import legalize
from ..core.types import is_float_dtype

op = relax.op

# Python operator -> what it computes on compile-time values (constant folding).
PY_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
PY_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
PY_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}

# Python operator -> Relax op on tensors. `%` and `//` follow Python (floor) semantics like torch.
ARITH = {
    ast.Add: op.add, ast.Sub: op.subtract, ast.Mult: op.multiply, ast.Div: op.divide,
    ast.FloorDiv: op.floor_divide, ast.Mod: op.floor_mod, ast.Pow: op.power, ast.MatMult: op.matmul,
}
# Operators that torch computes in float32 where one operand is a float16/bfloat16 tensor and the
# other a Python number (or run-time scalar), by device kind: the number enters as its float32 value,
# not rounded to the half dtype first, and the result is rounded once (`x * 1e5` is finite for
# x = 0.5, though 1e5 is inf in float16). torch's CUDA kernels do so for `+ - * /`, its CPU kernels
# for `*` and `/` only (`x + 0.1` adds 0.1 rounded to the half dtype). A number divided by a tensor
# is reciprocal(x) * number on both (Tensor.__rtruediv__), so it is not among them.
HALF_WITH_NUMBER_IN_FLOAT32 = {"cpu": (ast.Mult, ast.Div), "cuda": (ast.Add, ast.Sub, ast.Mult, ast.Div)}
# Bitwise operators: the integer op, and the logical op used on bool tensors.
BITWISE = {
    ast.BitAnd: (op.bitwise_and, op.logical_and),
    ast.BitOr: (op.bitwise_or, op.logical_or),
    ast.BitXor: (op.bitwise_xor, op.logical_xor),
}
COMPARE = {
    ast.Lt: op.less, ast.LtE: op.less_equal, ast.Gt: op.greater, ast.GtE: op.greater_equal,
    ast.Eq: op.equal, ast.NotEq: op.not_equal,
}
BOOL = {ast.And: op.logical_and, ast.Or: op.logical_or}

SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not",
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.And: "and", ast.Or: "or",
}


def number_dtype(*dtypes: str) -> str:
    """The dtype of a Python number of these kinds (numbers and run-time scalars, by scalar_kind), as
    Python holds it: bool, int64 or float64 (the dtype of a `s: float` parameter). It is what a number
    that differs between the paths of an `if` or the iterations of a loop becomes, still weak."""
    if any(is_float_dtype(d) for d in dtypes):
        return "float64"
    return "bool" if all(d == "bool" for d in dtypes) else "int64"


def weak_dtype(symbol: str, dtypes) -> str:
    """The dtype of an operator on two weak operands (Python numbers, run-time scalars, a recursive
    loop's index), which compute as Python does: bools stay bools only under `&`, `|`, `^` and
    comparisons; ints stay int64, except under `/`; a float makes float64 (a Python float)."""
    if symbol == "/":
        return "float64"
    dtype = number_dtype(*dtypes)
    if dtype == "bool" and symbol not in ("&", "|", "^", "<", "<=", ">", ">=", "==", "!="):
        return "int64"
    return dtype


# --------------------------------------------------------------------------------------------------
# The TensorIR backend: the same Python operators on scalar TIR expressions (both sides already of
# one dtype), with Python's semantics: `//` and `%` floor, `/` is true division (on floats).
# --------------------------------------------------------------------------------------------------
TIR_INT_ARITH = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: legalize.int_floor_divide, ast.Mod: legalize.int_floor_mod,  # no trap on 0 or INT_MIN // -1
}
TIR_FLOAT_ARITH = {
    # `-` and `/` kept from TVM's simplifier (`x - x` is NaN for inf; a divisor it folds to 0 was refused)
    ast.Add: operator.add, ast.Sub: legalize.subtract, ast.Mult: operator.mul, ast.Div: legalize.divide,
    ast.FloorDiv: legalize.floor_divide, ast.Mod: legalize.floor_mod,  # torch's rules, as on tensors
    ast.Pow: tirx.pow,
}
# On integers the bitwise op, on bools the logical one.
TIR_BITWISE = {
    ast.BitAnd: (tirx.bitwise_and, tirx.And), ast.BitOr: (tirx.bitwise_or, tirx.Or),
    ast.BitXor: (tirx.bitwise_xor, tirx.NE),
}
TIR_SHIFT = {ast.LShift: tirx.shift_left, ast.RShift: tirx.shift_right}
TIR_COMPARE = {
    ast.Lt: tirx.LT, ast.LtE: tirx.LE, ast.Gt: tirx.GT, ast.GtE: tirx.GE, ast.Eq: tirx.EQ, ast.NotEq: tirx.NE,
}

# Math functions callable in TIR-backend code -> (TIR intrinsic, rule). Rules: "float": integer
# arguments become float32 (as torch does), the result is a float; "same": the argument's dtype;
# "int": floor/ceil/trunc as Python's math module does, to an int64; "bool": a predicate.
_MATH = [
    ("exp", tirx.exp, "float"), ("exp2", tirx.exp2, "float"), ("log", tirx.log, "float"),
    ("log2", tirx.log2, "float"), ("log10", tirx.log10, "float"), ("log1p", tirx.log1p, "float"),
    ("sqrt", tirx.sqrt, "float"), ("sin", tirx.sin, "float"), ("cos", tirx.cos, "float"),
    ("tan", tirx.tan, "float"), ("sinh", tirx.sinh, "float"), ("cosh", tirx.cosh, "float"),
    ("tanh", tirx.tanh, "float"), ("asin", tirx.asin, "float"), ("acos", tirx.acos, "float"),
    ("atan", tirx.atan, "float"), ("erf", tirx.erf, "float"), ("atan2", tirx.atan2, "float"),
    ("pow", tirx.pow, "float"), ("hypot", tirx.hypot, "float"), ("copysign", tirx.copysign, "float"),
    ("isnan", tirx.isnan, "bool"), ("isinf", tirx.isinf, "bool"), ("isfinite", tirx.isfinite, "bool"),
]
TIR_MATH = {getattr(math, name): (fn, rule) for name, fn, rule in _MATH if hasattr(math, name)}
TIR_MATH.update({math.fabs: (tirx.abs, "float"), math.floor: (tirx.floor, "int"),
                 math.ceil: (tirx.ceil, "int"), math.trunc: (tirx.trunc, "int")})
TIR_MATH.update({getattr(torch, name): (fn, rule) for name, fn, rule in _MATH if hasattr(torch, name)})
TIR_MATH.update({torch.sigmoid: (tirx.sigmoid, "float"), torch.rsqrt: (tirx.rsqrt, "float"),
                 torch.abs: (tirx.abs, "same"), abs: (tirx.abs, "same"), torch.floor: (tirx.floor, "same"),
                 torch.ceil: (tirx.ceil, "same"), torch.trunc: (tirx.trunc, "same"),
                 torch.round: (tirx.nearbyint, "same")})
