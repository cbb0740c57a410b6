"""Software pipelining of a tensor-core dot's K loop (gpu.py), as Triton's `num_stages`: the operand
tiles get `stages` slots in shared memory, and while the warps multiply the tiles of step k, the
copies of step k + stages - 1 are in flight (cp.async: global to shared memory with no registers
between, waited for only stages - 1 steps later). A loop is pipelined when its body is only what
makes that possible: lets of the loop variable, the fills of the dot's operand tiles (each a masked
load at its own element, run by gpu.vector_fill), the dot, and then pointer blocks advanced by a
step that does not change in the loop (cpu.offsets' `offset += step`) and statements that touch
neither the tiles nor those offsets (`acc += tl.dot(a, b)`'s addition). The copies of a later step
are that step's fills: its loop variable, and the offsets advanced by the steps between."""
from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi
from tvm import tirx

from . import loops as nests
from .emit import BLOCK

MAX_SHARED = 200 * 1024   # the stages' bytes at most (an H100/H200 block may have 227 KB)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A K loop to pipeline: its lets, operand fills (outermost loops), dot and advances."""
    binds: list          # (var, value) of the lets before the fills
    fills: list          # the fill nests' outermost loops, in order
    dot: object          # the dot nest's outermost loop
    steps: dict          # offset buffer -> the step it advances by, each loop step
    stages: int


def plan(loop: tirx.For, dots: dict, fills_tile, stages: int, budget: int = MAX_SHARED) -> Plan | None:
    """The loop's Plan, or None where its body is not only lets, operand fills, one tensor-core dot
    and advances after it (fills_tile(nest) -> the buffer a fill copies a tile to, or None); at most
    as many stages as fit `budget` bytes of shared memory."""
    if stages < 2:
        return None
    body = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
    binds, fills, dot, steps, after = [], [], None, {}, []
    for s in body:
        if isinstance(s, tirx.Bind) and not fills and dot is None:
            binds.append((s.var, s.value))
        elif isinstance(s, tirx.AllocBuffer):
            continue   # the tiles' (replaced by their slots) and temporaries' (kept)
        elif isinstance(s, tirx.For) and BLOCK in s.annotations and s in dots and dot is None:
            dot = s
        elif isinstance(s, tirx.For) and BLOCK in s.annotations and dot is None and fills_tile(nests.nest(s)) is not None:
            fills.append(s)
        elif dot is not None and _advance(s) is not None:
            buf, step = _advance(s)
            steps[buf] = step
        elif dot is not None:
            after.append(s)   # what reads the product (`acc += tl.dot(a, b)`): checked below
        else:
            return None
    if dot is None or not fills:
        return None
    d = dots[dot][0]
    tiles = [fills_tile(nests.nest(f)) for f in fills]
    if len(tiles) != 2 or d.a.same_as(d.b) or not all(any(t.same_as(o) for t in tiles) for o in (d.a, d.b)) or \
            any(_touches(s, tiles) or any(_touches(s, [b]) for b in steps) for s in after):
        return None
    if any(tvm.runtime.DataType(str(t.ty.dtype)).bits != 16 for t in tiles):
        return None   # (tensor-core dots take 16-bit operands; a run's ragged rest is stored by st.shared.b16)
    changed = changing(loop)
    known = {var for var, _ in binds} | {loop.loop_var}
    if any(not _reads_only(value, changed - known) for _, value in binds) or \
            any(not _reads_only(step, changed) for step in steps.values()):
        return None
    if any(not _reads_only(f, changed - known, allowed=set(steps)) for f in fills):
        return None
    tile_bytes = sum(_bytes(t) for t in tiles)
    stages = min(stages, budget // tile_bytes)
    return Plan(binds, fills, dot, steps, stages) if stages >= 2 else None


def ahead(stmt, plan: Plan, loop: tirx.For, by) -> tirx.Stmt:
    """`stmt` (a fill of the loop's body) as it runs `by` steps after the current one: the lets
    inlined, the loop variable + by, each offset advanced by `by` steps."""
    for var, value in reversed(plan.binds):
        stmt = nests.substitute(stmt, var, value)
    stmt = nests.substitute(stmt, loop.loop_var, loop.loop_var + by)

    def advanced(load):
        step = plan.steps.get(load.source)
        return load if step is None else load + step * tirx.Cast(str(step.ty.dtype), by)
    return tvm_ffi.structural_map(stmt, [(tvm.ir.TensorLoad, advanced)])


def _advance(s):
    """(offset buffer, step) of `offset[0] = offset[0] + step`, else None."""
    if not isinstance(s, tirx.BufferStore) or str(s.buffer.ty.storage_scope) != "local" or \
            not isinstance(s.value, tirx.Add) or not isinstance(s.value.a, tvm.ir.TensorLoad) or \
            not s.value.a.source.same_as(s.buffer):
        return None
    return s.buffer, s.value.b


def _touches(stmt, buffers) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Var, lambda v: found.append(v) if any(v.same_as(b) for b in buffers) else None))
    return bool(found)


def changing(loop: tirx.For) -> set:
    """The variables a loop's steps bind (its own, its body's loops and lets) and the buffers they write."""
    found = {loop.loop_var}
    for s in nests.walk(loop.body):
        if isinstance(s, tirx.For):
            found.add(s.loop_var)
        elif isinstance(s, tirx.Bind):
            found.add(s.var)
        elif isinstance(s, tirx.BufferStore):
            found.add(s.buffer)
    return found


def _reads_only(node, changing: set, allowed=frozenset()) -> bool:
    """Whether `node` reads nothing the loop changes but its own loops' variables, the buffers it
    writes itself and `allowed` (the offsets, advanced explicitly)."""
    own, written = set(), set()
    if isinstance(node, tirx.Stmt):
        for s in nests.walk(node):
            if isinstance(s, tirx.For):
                own.add(s.loop_var)
            elif isinstance(s, tirx.BufferStore):
                written.add(s.buffer)
    found = []
    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, lambda e: found.append(e.source)), (tvm.ir.Var, found.append)])
    return all(x not in changing or x in own or x in allowed or x in written for x in found)


def _bytes(buf) -> int:
    n = 1
    for d in buf.ty.shape:
        n *= int(d)
    return n * tvm.runtime.DataType(str(buf.ty.dtype)).bits // 8
