"""Operator tables: each Python AST operator, its compile-time (Python) meaning and its Relax op."""
import ast
import operator

from tvm import relax

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
