"""A row's reduced value read once into a register: after TVM's all-reduce over several warps, every
thread reads the result from a one-element shared buffer that TVM marks volatile, and every read of
it in the kernel's later statements stays a load of its own (nvcc may merge no volatile loads)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..schedules.analysis import find_all

_SYNC = tvm.ir.Op.get("tirx.tvm_storage_sync")


def reduced_values_in_registers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Each volatile one-element buffer (an all-reduce's `red_result`) that a statement sequence
    writes, syncs and then only reads is bound once, after that statement, to a variable that its
    later reads use. A quantisation's `clamp(round(x / scale))` (TVM's NaN-aware clamp repeats its
    operand) had read the scale from shared memory and divided by it three times per element; and
    the copies of it that TVM writes onto itself (`red_result[0] = red_result[0]`) go."""
    volatile = [alloc.buffer for alloc in find_all(func.body, tirx.AllocBuffer)
                if alloc.annotations.get("tirx.volatile") and _one_element(alloc.buffer)]
    if not volatile:
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, lambda seq: _bound(seq, volatile))]))


def _bound(seq, volatile):
    stmts = [s for s in seq.seq if not _self_copy(s, volatile)]
    for buffer in volatile:
        written = [n for n, s in enumerate(stmts) if _stores(s, buffer)]
        if not written or not _ends_in_sync(stmts[written[-1]]):
            continue
        cut = written[-1] + 1
        rest = stmts[cut:]
        if not any(_loads(s, buffer) for s in rest):
            continue
        value = tirx.Var(buffer.name + "_value", str(buffer.ty.dtype))
        load = tirx.BufferLoad(buffer, [tirx.const(0, "int32")])

        def read(node, buffer=buffer, value=value):
            return value if node.source.same_as(buffer) else node
        rest = [tvm_ffi.structural_map(s, [(tvm.ir.TensorLoad, read)]) for s in rest]
        stmts = stmts[:cut] + [tirx.LetStmt(value, load)] + rest
    return tirx.SeqStmt(stmts) if len(stmts) != 1 else stmts[0]


def _one_element(buffer) -> bool:
    shape = list(buffer.ty.shape)
    return all(isinstance(d, tirx.IntImm) and int(d) == 1 for d in shape)


def _stores(stmt, buffer) -> bool:
    return any(store.buffer.same_as(buffer) for store in find_all(stmt, tirx.BufferStore))


def _loads(stmt, buffer) -> bool:
    return any(load.source.same_as(buffer) for load in find_all(stmt, tvm.ir.TensorLoad))


def _self_copy(stmt, volatile) -> bool:
    """`red_result[0] = red_result[0]`: what TVM leaves of a copy of the result that StorageRewrite
    put in the result's own storage."""
    return isinstance(stmt, tirx.BufferStore) and isinstance(stmt.value, tvm.ir.TensorLoad) and \
        stmt.value.source.same_as(stmt.buffer) and any(stmt.buffer.same_as(b) for b in volatile) and \
        tvm_ffi.structural_equal(stmt.indices, stmt.value.indices)


def _ends_in_sync(stmt) -> bool:
    """Whether the statement's last action is a barrier (the all-reduce's, after its shared store):
    every thread then reads the stored value."""
    while isinstance(stmt, (tirx.AttrStmt,)):
        stmt = stmt.body
    last = stmt.seq[-1] if isinstance(stmt, tirx.SeqStmt) else stmt
    return isinstance(last, tirx.Evaluate) and isinstance(last.value, tvm.ir.Call) and last.value.op.same_as(_SYNC)
