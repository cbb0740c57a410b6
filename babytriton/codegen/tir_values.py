"""The values the TIR visitor works with, and what it asks of them: tensor parameters (buffers), run-time
locals (one-element buffers), the loops being compiled, what a pass learns about a variable (`Note`),
and the kinds and promotion of scalar values (Python numbers weak, as in torch)."""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

import torch
import tvm
from tvm import tirx
from tvm.ir.expr import TensorLoad

from ..core.types import DTYPES, TORCH_TO_NAME, format_shape

INT64 = "int64"


def parallel(*args):
    """`for i in bt.parallel(n)` (the arguments of range): the iterations are independent, so they run
    in parallel: GPU threads on a GPU target, CPU threads on a CPU one (TIR backend only). The loop must be
    at the top of the function body or the only statement of another bt.parallel loop. Outside @jit
    it is `range`."""
    return range(*args)


@dataclass
class TensorParam:
    """A tensor parameter: a TIR buffer; its shape entries are ints or symbolic TIR variables."""
    name: str
    buffer: object
    shape: tuple
    dtype: str


@dataclass
class Local:
    """A Python variable that changes at run time: a one-element buffer of a fixed dtype."""
    name: str
    buffer: object
    dtype: str
    line: int
    loop: object = None      # the bt.parallel loop it was created in (None: outside any)


@dataclass
class Loop:
    """A loop being compiled: what `break`/`continue` and the race checks need to know."""
    kind: str                # "range" | "parallel" | "while"
    node: ast.AST
    names: set = field(default_factory=set)         # its loop variable's name
    variables: list = field(default_factory=list)   # a parallel nest's loop variables, outer first
    broke: object = None     # one-element flag buffers: `break` happened / `continue` this iteration
    skipped: object = None


@dataclass(frozen=True)
class Note:
    """What one pass learned about a variable: its dtype (or weak Python kind) and whether it
    needs storage (it is assigned at run time)."""
    kind: str
    runtime: bool


def is_expr(value) -> bool:
    """A scalar TIR expression (a run-time value)."""
    return isinstance(value, tvm.ir.Expr) and isinstance(getattr(value, "ty", None), tvm.ir.PrimType)


def is_python(value) -> bool:
    """A compile-time value (not a run-time expression or a tensor)."""
    return not (is_expr(value) or isinstance(value, TensorParam))


def dtype_of(value) -> str:
    return str(value.ty.dtype)


def kind_of(value) -> str | None:
    if isinstance(value, bool):
        return "py:bool"
    if isinstance(value, int):
        return "py:int"
    if isinstance(value, float):
        return "py:float"
    return dtype_of(value) if is_expr(value) else None


@functools.lru_cache(maxsize=None)
def _sample(kind: str):
    if kind.startswith("py:"):
        return {"py:bool": False, "py:int": 0, "py:float": 0.0}[kind]
    return torch.empty((), dtype=DTYPES[kind])


def join(a: str | None, b: str | None) -> str | None:
    """The kind holding both: torch's promotion, Python numbers being weak."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if a.startswith("py:") and b.startswith("py:"):
        order = ["py:bool", "py:int", "py:float"]
        return max(a, b, key=order.index)
    return TORCH_TO_NAME[torch.result_type(_sample(a), _sample(b))]


def storage_dtype(kind: str) -> str:
    return {"py:bool": "bool", "py:int": INT64, "py:float": "float32"}.get(kind, kind)


def describe(value) -> str:
    if isinstance(value, TensorParam):
        return f"the tensor '{value.name}' ({value.dtype}, shape {format_shape(value.shape)})"
    if is_expr(value):
        return f"a run-time {dtype_of(value)} value"
    return f"{type(value).__name__} {value!r}"


def loads_memory(expr) -> bool:
    """Whether an expression reads a buffer (so its value depends on when it is evaluated)."""
    if isinstance(expr, TensorLoad):
        return True
    for name in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(expr, name, None)
        if isinstance(child, tvm.ir.Expr) and loads_memory(child):
            return True
    return any(loads_memory(arg) for arg in getattr(expr, "args", ()) if isinstance(arg, tvm.ir.Expr))


def uses_any(expr, variables) -> bool:
    if any(expr.same_as(v) for v in variables):
        return True
    if isinstance(expr, TensorLoad):
        return any(uses_any(i, variables) for i in expr.indices)
    for name in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(expr, name, None)
        if isinstance(child, tvm.ir.Expr) and uses_any(child, variables):
            return True
    return any(uses_any(arg, variables) for arg in getattr(expr, "args", ()) if isinstance(arg, tvm.ir.Expr))


def leaves(nodes, kinds) -> bool:
    """Whether statements hold a `break`/`continue` (of `kinds`) of the loop they are in."""
    for node in nodes:
        if isinstance(node, kinds):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda, ast.expr)) and \
                leaves(ast.iter_child_nodes(node), kinds):
            return True
    return False


def negate(condition):
    """`not c` as `c ^ True`, not Not(c): TVM's simplifier turns !(a >= b) into a < b, false where a
    or b is NaN (the same rule as legalize._logical_not)."""
    return tirx.bitwise_xor(condition, tirx.const(True, "bool"))
