"""What the schedules share: a block nest's loops, substitution, and walking the block program's statements."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .emit import BLOCK, REDUCE


def nest(loop: tirx.For) -> list[tirx.For]:
    """The loops of a block nest, from its annotated outermost loop."""
    nest = [loop]
    for _ in range(int(loop.annotations[BLOCK]) - 1):
        nest.append(nest[-1].body)
    return nest


def substitute(stmt, var, value):
    return tvm_ffi.structural_map(stmt, [(tvm.ir.Var, lambda v: value if v.same_as(var) else v)])


def seq(stmts: list) -> tirx.Stmt:
    """Statements in order (TVM refuses a sequence of one)."""
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def int_imm(value: int, dtype: str = "int32") -> tirx.IntImm:
    return tirx.IntImm(dtype, value)


def reduction_loop(body: tirx.Stmt):
    """The loop over a reduced axis that ends a reduction nest's body, if it has a reducer."""
    last = body.seq[-1] if isinstance(body, tirx.SeqStmt) else body
    if isinstance(last, tirx.For) and REDUCE in last.annotations and \
            isinstance(last.annotations[REDUCE], tirx.CommReducer):
        return last
    return None


def children(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.For):
        return [stmt.body]
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, tirx.AttrStmt):
        return [stmt.body]
    return []


def walk(stmt):
    yield stmt
    for child in children(stmt):
        yield from walk(child)
