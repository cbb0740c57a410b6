"""Choices between register values computed without branches. TVM's RewriteUnsafeSelect turns every
`Select` that reads a buffer in an arm into an `if_then_else` (a branch, so that a guarded load is
never made), registers included, and TVM prints `and`/`or` as C's short-circuit `&&`/`||`. An
argmax's (index, value) update reads its partial pair from registers in both arms: nvcc made its
CUDA nested branches, 56 instructions and 12 branches an element in p46's column argmax
(x[967, 32000].max(dim=-2), 123 us on an H200 for 62 MB), 17 and none once they are selects and
predicate logic (`&`, `|`)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..schedules.analysis import find_all

_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
_PURE = 1  # CallEffectKind.kPure


def selects_on_registers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A CUDA kernel's branches between register values as selects (`branchless`)."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "cuda":
        return func  # (LLVM if-converts such branches itself)
    body = branchless(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def branchless(stmt: tirx.Stmt) -> tirx.Stmt:
    """Each `if_then_else` whose arms are `_speculable` as the `Select` it was, and each scalar bool
    `and`, `or` or `Select` of speculable operands as bitwise logic: every operand is evaluated,
    which costs a register read or a compare each, and nvcc predicates the choice."""
    def select(call):
        if not call.op.same_as(_IF_THEN_ELSE) or not all(_speculable(arm) for arm in call.args[1:]):
            return call
        return tirx.Select(call.args[0], call.args[1], call.args[2])

    def logic(node):
        if str(node.ty.dtype) != "bool" or not _speculable(node):
            return node  # (a vector of bools: CUDA has no bitwise operators on them)
        if isinstance(node, tirx.Select):
            return tirx.bitwise_or(tirx.bitwise_and(node.condition, node.true_value),
                                   tirx.bitwise_and(tirx.Not(node.condition), node.false_value))
        return (tirx.bitwise_and if isinstance(node, tirx.And) else tirx.bitwise_or)(node.a, node.b)
    stmt = tvm_ffi.structural_map(stmt, [(tvm.ir.Call, select)])
    return tvm_ffi.structural_map(stmt, [(tirx.Select, logic), (tirx.And, logic), (tirx.Or, logic)])


def _speculable(expr) -> bool:
    """Whether evaluating `expr` where it would not have been can neither fault nor change state: it
    loads only from registers (`local` buffers, which no index of a scheduled kernel takes out of
    their bounds) and calls only pure functions."""
    if any(load.source.scope() != "local" for load in find_all(expr, tvm.ir.TensorLoad)):
        return False
    for call in find_all(expr, tvm.ir.Call):
        op = call.op
        if not isinstance(op, tvm.ir.Op) or op.same_as(_IF_THEN_ELSE):
            return False  # (an inner branch that stayed one: its arm was not safe to evaluate)
        effect = op.get_attr("TCallEffectKind")
        if effect is None or int(effect) != _PURE:
            return False
    return True
