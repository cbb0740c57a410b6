"""Masked vectors, shared by the schedules (cpu.py, gpu.py): a vectorised loop whose masks (a store's
`if`, a load's if_then_else) depend on its lane would run one lane at a time in TVM; `masked_vector`
runs it as whole vectors where all its masks hold or none does, and lane by lane only at a block's
ragged edge."""
from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym.pattern import detect_linear_equation

from . import loops as nests


def masked_vector(lane, extent: int, body: tirx.Stmt, held_notes=None, selects: bool = False) -> tirx.Stmt:
    """A vectorised loop over `lane`. Where its masks (a store's `if`, a load's if_then_else) depend
    on the lane, TVM would run the vector one lane at a time: instead, where every lane's masks hold
    (a block's inside, away from its ragged edge), the vector runs without them; where none holds
    (past the edge), with each mask false; elsewhere lane by lane. `held_notes`: the annotations of
    the buffer that holds each lane's masks where they are of another form. `selects`: a `where`'s
    condition that depends on the lane is a mask too (CUDA has no vector of booleans to select by)."""
    masks = []

    def collect(cond):
        if uses(cond, lane) and not any(tvm_ffi.structural_equal(cond, m) for m in masks):
            masks.append(cond)
    for stmt in nests.walk(body):
        if isinstance(stmt, tirx.IfThenElse):
            collect(stmt.condition)
    for call in calls(body, "prim.if_then_else"):
        collect(call.args[0])
    if selects:
        tvm_ffi.structural_walk(body, (tirx.Select, lambda e: collect(e.condition)))

    def vectorised(kind, stmt):   # each copy of the body binds values of its own (TIR's are SSA)
        return tirx.For(lane, nests.int_imm(0), nests.int_imm(extent), kind, fresh_binds(stmt))
    if not masks:
        return vectorised(tirx.ForKind.VECTORIZED, body)
    ends = [at_ends(m, lane, extent) for m in masks]
    lane_by_lane = vectorised(tirx.ForKind.SERIAL, body)
    if all(e is not None for e in ends):
        every = functools.reduce(tirx.And, [e[0] for e in ends])
        none = functools.reduce(tirx.And, [e[1] for e in ends])
        return tirx.IfThenElse(every, vectorised(tirx.ForKind.VECTORIZED, masks_as(body, masks, True)),
                               tirx.IfThenElse(none, vectorised(tirx.ForKind.VECTORIZED,
                                                                masks_as(body, masks, False)), lane_by_lane))
    # masks of other forms: each lane's computed at once (a vector), the vector runs unmasked where all hold
    held = tirx.decl_buffer((extent,), "bool", "held", scope="local")
    every = tirx.Var("every", "bool")
    check = vectorised(tirx.ForKind.VECTORIZED, tirx.BufferStore(held, functools.reduce(tirx.And, masks), [lane]))
    all_held = functools.reduce(tirx.And, [held[i] for i in range(extent)])
    return nests.seq([tirx.AllocBuffer(held, annotations=held_notes or {}), check, tirx.Bind(every, all_held), tirx.IfThenElse(
        every, vectorised(tirx.ForKind.VECTORIZED, masks_as(body, masks, True)), lane_by_lane)])


def fresh_binds(stmt: tirx.Stmt) -> tirx.Stmt:
    """`stmt` with a new variable for each value it binds."""
    bound = {s.var: tirx.Var(s.var.name, s.var.ty) for s in nests.walk(stmt) if isinstance(s, tirx.Bind)}
    if not bound:
        return stmt
    return tvm_ffi.structural_map(stmt, [(tvm.ir.Var, lambda v: bound.get(v, v)),
                                         (tirx.Bind, lambda b: tirx.Bind(bound.get(b.var, b.var), b.value))])


def at_ends(cond, lane, extent: int):
    """(holds in every lane, fails in every lane) as scalar conditions, or None. A comparison of
    values linear in the lane changes truth at most once along the lanes (a line is monotone), so
    the first and last lanes decide; a conjunction holds where each part holds, fails where any part
    fails everywhere. Other forms (a modulo, a gathered index): None."""
    if not uses(cond, lane):
        return cond, tirx.Not(cond)
    if isinstance(cond, tirx.And):
        a, b = at_ends(cond.a, lane, extent), at_ends(cond.b, lane, extent)
        return None if a is None or b is None else (tirx.And(a[0], b[0]), tirx.Or(a[1], b[1]))
    if not isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)) or "int" not in str(cond.a.ty.dtype) or \
            not detect_linear_equation(cond.a - cond.b, [lane]):
        return None
    first, last = nests.substitute(cond, lane, nests.int_imm(0, lane.ty.dtype)), \
        nests.substitute(cond, lane, nests.int_imm(extent - 1, lane.ty.dtype))
    return tirx.And(first, last), tirx.And(tirx.Not(first), tirx.Not(last))


def masks_as(body: tirx.Stmt, masks: list, value: bool) -> tirx.Stmt:
    """`body` with each of `masks` known to be `value`: a load's if_then_else its value or its
    `other`, a store's `if` its branch, a select its side."""
    def known(cond):
        return any(tvm_ffi.structural_equal(cond, m) for m in masks)

    def branch(stmt):
        if not known(stmt.condition):
            return stmt
        taken = stmt.then_case if value else stmt.else_case
        return taken if taken is not None else tirx.Evaluate(nests.int_imm(0))

    def call(c):
        return (c.args[1] if value else c.args[2]) if c.op.name == "prim.if_then_else" and known(c.args[0]) else c

    def select(e):   # a `where` on a mask's condition (layer norm's) is decided too
        return (e.true_value if value else e.false_value) if known(e.condition) else e
    return tvm_ffi.structural_map(body, [(tirx.IfThenElse, branch), (tvm.ir.Call, call), (tirx.Select, select)])


def uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


def calls(stmt, name: str) -> list:
    """The calls of op `name` in `stmt` (every call: "")."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if c.op.name == name or not name else None))
    return found
