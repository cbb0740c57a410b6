"""The block program on a CPU (schedule.py): the programs one parallel loop (a task each; one after
another where the kernel has atomics), each block nest's innermost loop vectorised in vectors of
LANES, masked vectors only at a block's ragged edge, reductions to a scalar in LANES partial results."""
from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import tirx

from . import loops as nests
from .emit import ATOMIC, BLOCK, PROGRAM, REDUCE

LANES = 16        # a CPU vector: 16 x 32 bits (AVX-512)


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with its programs in parallel and its block loops vectorised."""
    # atomics are plain updates on a CPU: the programs then run one after another
    kind = tirx.ForKind.SERIAL if func.attrs is not None and ATOMIC in func.attrs else tirx.ForKind.PARALLEL
    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, lambda loop: _cpu_loop(loop, kind))]))


def _cpu_loop(loop: tirx.For, kind: tirx.ForKind) -> tirx.Stmt:
    notes = loop.annotations
    if PROGRAM in notes:
        return _parallel_programs(loop, kind) if int(notes[PROGRAM]) == 2 else loop
    if BLOCK in notes and ATOMIC not in notes:
        return _vectorised(loop)
    return loop


def _parallel_programs(outer: tirx.For, kind: tirx.ForKind) -> tirx.For:
    """The three program loops as one parallel loop over every program, each axis's id bound from it."""
    loops = [outer, outer.body, outer.body.body]          # axes 2, 1, 0
    body = loops[2].body
    extents = [tirx.Cast("int64", loop.extent) for loop in loops]
    flat = tirx.Var("program", "int64")
    g2, g1, g0 = extents
    ids = [tirx.floordiv(flat, g0 * g1), tirx.floormod(tirx.floordiv(flat, g0), g1), tirx.floormod(flat, g0)]
    binds = [tirx.Bind(loop.loop_var, tirx.Cast("int32", value)) for loop, value in zip(loops, ids)]
    return tirx.For(flat, nests.int_imm(0, "int64"), g2 * g1 * g0, kind, nests.seq([*binds, body]))


def _vectorised(outer: tirx.For) -> tirx.Stmt:
    """The nest with its innermost loop vectorised. A reduction nest's innermost result axis goes
    inside the reduced loop (its elements are independent: a vector of results per step); a
    reduction to a scalar keeps LANES partial results, combined at the end."""
    nest = nests.nest(outer)
    inner = nest[-1]
    body = inner.body
    last = body.seq[-1] if isinstance(body, tirx.SeqStmt) else body
    reduction = last if isinstance(last, tirx.For) and REDUCE in last.annotations else None
    if reduction is not None and len(nest) == 1 and int(inner.extent) == 1:
        new = _lane_reduction(inner, reduction)
    elif not isinstance(inner.extent, tirx.IntImm) or inner.extent.value < 2:
        return outer
    elif reduction is not None:
        inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
        steps = tirx.For(reduction.loop_var, reduction.min, reduction.extent, reduction.kind,
                         _vector_loop(inner.loop_var, inner.extent.value, reduction.body),
                         annotations=reduction.annotations)
        new = nests.seq(([_vector_loop(inner.loop_var, inner.extent.value, nests.seq(inits))] if inits else [])
                           + [steps])
    else:
        new = _vector_loop(inner.loop_var, inner.extent.value, body)
    for loop in reversed(nest[:-1]):
        new = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, new, annotations=loop.annotations)
    return new


def _vector_loop(var, extent: int, body: tirx.Stmt) -> tirx.Stmt:
    """`body` for var in range(extent), vectorised (in vectors of LANES when longer), with fresh loop vars."""
    lane = tirx.Var(f"{var.name}_lane", var.ty.dtype)
    if extent <= LANES or extent % LANES:
        return _masked_vector(lane, extent, nests.substitute(body, var, lane))
    chunk = tirx.Var(f"{var.name}_vec", var.ty.dtype)
    return tirx.For(chunk, nests.int_imm(0), nests.int_imm(extent // LANES), tirx.ForKind.SERIAL,
                    _masked_vector(lane, LANES, nests.substitute(body, var, chunk * LANES + lane)))


def _masked_vector(lane, extent: int, body: tirx.Stmt) -> tirx.Stmt:
    """A vectorised loop over `lane`. Where its masks (a store's `if`, a load's if_then_else) depend
    on the lane, TVM would run the vector one lane at a time: instead the masks are computed first,
    and where every lane's hold (a block's inside, away from its ragged edge), the vector runs
    without them; elsewhere lane by lane."""
    masks = []

    def collect(cond):
        if _uses(cond, lane) and not any(tvm_ffi.structural_equal(cond, m) for m in masks):
            masks.append(cond)
    for stmt in nests.walk(body):
        if isinstance(stmt, tirx.IfThenElse):
            collect(stmt.condition)
    for call in _calls(body, "prim.if_then_else"):
        collect(call.args[0])
    vector = tirx.For(lane, nests.int_imm(0), nests.int_imm(extent), tirx.ForKind.VECTORIZED, body)
    if not masks:
        return vector
    held = tirx.decl_buffer((extent,), "bool", "held", scope="local")
    every = tirx.Var("every", "bool")
    check = tirx.For(lane, nests.int_imm(0), nests.int_imm(extent), tirx.ForKind.VECTORIZED,
                     tirx.BufferStore(held, functools.reduce(tirx.And, masks), [lane]))
    all_held = functools.reduce(tirx.And, [held[i] for i in range(extent)])

    def unmasked_if(stmt):
        return stmt.then_case if any(tvm_ffi.structural_equal(stmt.condition, m) for m in masks) else stmt

    def unmasked_call(call):
        if call.op.name == "prim.if_then_else" and any(tvm_ffi.structural_equal(call.args[0], m) for m in masks):
            return call.args[1]
        return call
    fast = tvm_ffi.structural_map(body, [(tirx.IfThenElse, unmasked_if), (tvm.ir.Call, unmasked_call)])
    return nests.seq([tirx.AllocBuffer(held), check, tirx.Bind(every, all_held), tirx.IfThenElse(
        every, tirx.For(lane, nests.int_imm(0), nests.int_imm(extent), tirx.ForKind.VECTORIZED, fast),
        tirx.For(lane, nests.int_imm(0), nests.int_imm(extent), tirx.ForKind.SERIAL, body))])


def _uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


def _calls(stmt, name: str) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if c.op.name == name else None))
    return found


def _lane_reduction(nest: tirx.For, loop: tirx.For) -> tirx.Stmt:
    """A reduction to a scalar in LANES partial results (one vector), then combined: LLVM does not
    vectorise a floating-point sum on its own (it would reorder the additions)."""
    reducer = loop.annotations[REDUCE]
    extent = int(loop.extent)
    if not isinstance(reducer, tirx.CommReducer) or extent % LANES or extent < 2 * LANES:
        return nest
    body = nest.body
    inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
    stores = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
    bufs = [store.buffer for store in stores]
    partials = [tirx.decl_buffer((LANES,), b.ty.dtype, f"{b.name}_lanes", scope="local") for b in bufs]
    lane, chunk = tirx.Var("lane", "int32"), tirx.Var("r_vec", "int32")
    to_lanes = {b: p for b, p in zip(bufs, partials)}
    step = tvm_ffi.structural_map(
        nests.seq([tirx.Bind(loop.loop_var, chunk * LANES + lane), loop.body]),
        [(tvm.ir.TensorLoad, lambda e: to_lanes[e.source][lane] if e.source in to_lanes else e),
         (tirx.BufferStore, lambda st: tirx.BufferStore(to_lanes[st.buffer], st.value, [lane])
          if st.buffer in to_lanes else st)])
    start = tirx.For(lane, nests.int_imm(0), nests.int_imm(LANES), tirx.ForKind.VECTORIZED, nests.seq(
        [tirx.BufferStore(p, init, [lane]) for p, init in zip(partials, reducer.identity_element)]))
    main = tirx.For(chunk, nests.int_imm(0), nests.int_imm(extent // LANES), tirx.ForKind.SERIAL,
                    tirx.For(lane, nests.int_imm(0), nests.int_imm(LANES), tirx.ForKind.VECTORIZED, step))
    # the lanes combined in order: every result from the old values first, then stored
    finals = [tirx.Var(f"{b.name}_next", b.ty.dtype) for b in bufs]
    binding = {**{v: b[0] for v, b in zip(reducer.lhs, bufs)}, **{v: p[lane] for v, p in zip(reducer.rhs, partials)}}
    results = [tvm_ffi.structural_map(r, [(tvm.ir.Var, lambda v: binding.get(v, v))]) for r in reducer.result]
    finish = tirx.For(lane, nests.int_imm(0), nests.int_imm(LANES), tirx.ForKind.SERIAL, nests.seq(
        [tirx.Bind(f, r) for f, r in zip(finals, results)] + [tirx.BufferStore(b, f, [nests.int_imm(0)])
                                                              for b, f in zip(bufs, finals)]))
    return nests.seq([*inits, *[tirx.AllocBuffer(p) for p in partials], start, main, finish])
