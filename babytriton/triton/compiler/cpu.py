"""The block program on a CPU (schedule.py): the programs one parallel loop (a task each; one after
another where the kernel has atomics), each block nest's innermost loop vectorised in vectors of
LANES, masked vectors only at a block's ragged edge (and, apart, where a modulo wraps an index around),
reductions to a scalar in CHAINS vectors of partial results (a fill just before one computed in its
loop), a dot's narrow tiles stored widened; a program's buffers on its thread's stack (`build`)."""
from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym.pattern import detect_linear_equation

from ...lowering import pipeline
from . import loops as nests
from .emit import ATOMIC, BLOCK, PROGRAM, REDUCE
from .masks import calls, masked_vector, uses

LANES = 16        # a CPU vector: 16 x 32 bits (AVX-512)
CHAINS = 4        # a reduction to a scalar's vectors of partial results, updated in turn
ACCUMULATORS = 16  # vectors of results a step of a rank-2 reduction updates in registers (of AVX-512's 32)
ROWS = 4          # its rows per step where more vectors than those make a row
STACK_BYTES = 256 * 1024   # a program's buffers kept on its thread's stack (threads have megabytes)
ON_STACK = {"disable_lower_builtin": tirx.IntImm("bool", 1)}   # TVM's annotation: an alloca, no workspace


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with its programs in parallel and its block loops vectorised."""
    # atomics are plain updates on a CPU: the programs then run one after another
    kind = tirx.ForKind.SERIAL if func.attrs is not None and ATOMIC in func.attrs else tirx.ForKind.PARALLEL
    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, lambda seq: offsets(seq, wraps=True))])
    body = tvm_ffi.structural_map(body, [(tirx.SeqStmt, _widened)])
    body = tvm_ffi.structural_map(body, [(tirx.SeqStmt, _fuse)])
    body = tvm_ffi.structural_map(body, [(tirx.For, lambda loop: _cpu_loop(loop, kind))])
    return func.with_body(_on_stack(body))


def with_ones(func: tirx.PrimFunc, names) -> tirx.PrimFunc:
    """`func` with the int parameters that every launch of this version passes as 1 (Triton's
    equal_to_1, part of the key) as the constant 1: a unit stride makes a block's load contiguous,
    one vector load where it was a gather."""
    ones = {p: tirx.const(1, str(p.ty.dtype)) for p in func.params
            if p.name in names and "int" in str(getattr(p.ty, "dtype", ""))}
    if not ones:
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.ir.Var, lambda v: ones.get(v, v))]))


def work(func: tirx.PrimFunc) -> int | None:
    """A program's widest block nest's elements (times its enclosing loops' trips), or None where a
    loop's trips are known only at run time: with the grid, how many threads a launch is worth
    (runtime/threads.py; its elements as torch counts a loop's, those of the result)."""
    def count(stmt, times: int):
        if isinstance(stmt, tirx.For) and BLOCK in stmt.annotations:
            loops = nests.nest(stmt)
            if not all(isinstance(loop.extent, tirx.IntImm) for loop in loops):
                return None
            return times * functools.reduce(lambda a, b: a * b, (int(loop.extent) for loop in loops), 1)
        if isinstance(stmt, tirx.For) and PROGRAM not in stmt.annotations:
            if not any(isinstance(s, tirx.For) and BLOCK in s.annotations for s in nests.walk(stmt.body)):
                return 0
            if not isinstance(stmt.extent, tirx.IntImm):
                return None
            times *= int(stmt.extent)
        elif not isinstance(stmt, (tirx.For, tirx.SeqStmt, tirx.IfThenElse, tirx.AttrStmt)) and hasattr(stmt, "body"):
            return None   # a body this count does not walk
        parts = [count(child, times) for child in nests.children(stmt)]
        return None if None in parts else max(parts, default=0)
    return count(func.body, 1)


def build(mod: tvm.IRModule, target: tvm.target.Target):
    """The scheduled module compiled as every kernel is (pipeline.compile_module), less TVM's
    StorageRewrite: it would drop the buffers' stack annotations (_on_stack)."""
    ctx = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=ctx.opt_level, required_pass=list(ctx.required_pass),
                                   disabled_pass=list(ctx.disabled_pass), instruments=list(ctx.instruments),
                                   config={**dict(ctx.config), "tirx.disable_storage_rewrite": True}):
        return pipeline.compile_module(mod, target)


def _on_stack(body: tirx.Stmt) -> tirx.Stmt:
    """The program's buffers on the stack, first come first served up to STACK_BYTES: TVM takes
    every other local buffer from its workspace pool, a call to allocate and one to free per buffer
    and program (vector add's 1024-element programs ran at half speed)."""
    left = [STACK_BYTES]

    def place(alloc: tirx.AllocBuffer) -> tirx.AllocBuffer:
        buf = alloc.buffer
        size = functools.reduce(lambda a, b: a * b, (int(d) for d in buf.ty.shape), 1)
        size *= max(1, tvm.DataType(str(buf.ty.dtype)).bits // 8)
        if "disable_lower_builtin" in alloc.annotations or size > left[0] or _retyped(buf):
            return alloc
        left[0] -= size
        return tirx.AllocBuffer(buf, annotations={**dict(alloc.annotations), **ON_STACK})
    return tvm_ffi.structural_map(body, [(tirx.AllocBuffer, place)])


def offsets(seq: tirx.SeqStmt, recompute=frozenset(), only: bool = False, wraps: bool = False) -> tirx.Stmt:
    """A block that a program fills once from values that never change and then only moves by a
    step the same for every element (a pointer block advanced in a loop: `a_ptrs += BLOCK_K *
    stride_ak`), as the fill's expression plus one scalar offset: each load then indexes memory by
    that expression, contiguous where it is linear with a unit stride (a vector load, not a gather
    through a buffer of pointers). `recompute`: buffers whose fills may recompute the expression at
    every read even where it is not contiguous (a GPU's tensor-core operand tiles: a thread's registers
    are too few to keep a block of 64-bit offsets, and their fill computes each run's start once);
    `only`: no other block changed (on a GPU a recomputed expression read under a mask is recomputed in
    every step of the loop, its divisions too); `wraps`: an expression contiguous but for a modulo that
    wraps it around (`(start + arange) % N`) is recomputed too (the CPU's vector loops split off the
    vectors that do not wrap: _unwrapped)."""
    stmts = list(seq.seq)
    for alloc in [s for s in stmts if isinstance(s, tirx.AllocBuffer)]:
        stmts = _as_offset(stmts, alloc, recompute, only, wraps) or stmts
    unchanged = len(stmts) == len(seq.seq) and all(a.same_as(b) for a, b in zip(stmts, seq.seq))
    return seq if unchanged else nests.seq(stmts)


def _as_offset(stmts: list, alloc: tirx.AllocBuffer, recompute=frozenset(), only: bool = False, wraps: bool = False):
    """`stmts` with `alloc`'s block an expression plus an offset (offsets), or None where it is not
    one: another kind of store to it, a fill that reads memory or is not its first access."""
    buf = alloc.buffer
    touching = [i for i, s in enumerate(stmts) if not isinstance(s, tirx.AllocBuffer) and buf in _accesses(s)]
    if not touching or not _elementwise(stmts[touching[0]]):
        return None
    loops = nests.nest(stmts[touching[0]])
    fill = loops[-1].body
    if not isinstance(fill, tirx.BufferStore) or not fill.buffer.same_as(buf) or _accesses(tirx.Evaluate(fill.value)) \
            or not _same(list(fill.indices), [loop.loop_var for loop in loops]):
        return None
    offset = tirx.decl_buffer((1,), str(buf.ty.dtype), f"{buf.name}_offset", scope="local")

    def step(loop: tirx.For):
        if BLOCK not in loop.annotations or not _elementwise(loop):
            return loop
        nest = nests.nest(loop)
        store = nest[-1].body
        if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(buf) or \
                not isinstance(store.value, tirx.Add) or not isinstance(store.value.a, tvm.ir.TensorLoad) or \
                not store.value.a.source.same_as(buf):
            return loop
        index = [l.loop_var for l in nest]
        moved = store.value.b
        if not _same(list(store.indices), index) or not _same(list(store.value.a.indices), index) or \
                _accesses(tirx.Evaluate(moved)) or any(uses(moved, v) for v in index):
            return loop
        return tirx.BufferStore(offset, offset[0] + moved, [nests.int_imm(0)])

    # recomputed where that makes the load contiguous, else (a modulo, a gather) read from the block
    inner = loops[-1].loop_var
    unit = _unit_stride(_unwrapped(fill.value, inner, 1)[0] if wraps else fill.value, inner)
    kept = []

    def read(e):
        if not e.source.same_as(buf):
            return e
        if not unit:
            kept.append(e)
            return e + offset[0]
        value = fill.value
        for loop, i in zip(loops, e.indices):
            value = nests.substitute(value, loop.loop_var, i)
        return value + offset[0]
    rest = [tvm_ffi.structural_map(s, [(tirx.For, step)]) for s in stmts[touching[0] + 1:]]
    if any(w for s in rest for w, _ in _accesses(s).get(buf, [])):
        return None   # written otherwise
    into = _read_only_into(rest, buf, recompute)
    if only and not into:
        return None
    unit = unit or into
    rest = [tvm_ffi.structural_map(s, [(tvm.ir.TensorLoad, read)]) for s in rest]
    zero = tirx.BufferStore(offset, tirx.const(0, str(buf.ty.dtype)), [nests.int_imm(0)])
    head = [s for s in stmts[:touching[0]] if kept or not s.same_as(alloc)]
    return [tirx.AllocBuffer(offset)] + head + ([stmts[touching[0]]] if kept else []) + [zero] + rest


def _read_only_into(stmts: list, buf, targets) -> bool:
    """Whether every read of `buf` in `stmts` is in the value of a store to one of `targets`."""
    reads, into = [], []
    for stmt in stmts:
        tvm_ffi.structural_walk(stmt, (tvm.ir.TensorLoad, lambda e: reads.append(e) if e.source.same_as(buf) else None))
        for s in nests.walk(stmt):
            if isinstance(s, tirx.BufferStore) and s.buffer in targets:
                tvm_ffi.structural_walk(s.value, (tvm.ir.TensorLoad, lambda e: into.append(e) if e.source.same_as(buf) else None))
    return bool(reads) and len(reads) == len(into)


def _unit_stride(expr, var) -> bool:
    """Whether `expr` is linear in `var` with coefficient 1: consecutive elements (integer casts, the
    int32 index widened to an int64 offset, seen through)."""
    expr = tvm_ffi.structural_map(expr, [(tirx.Cast, lambda c: c.value if "int" in str(c.ty.dtype) and
                                          "int" in str(c.value.ty.dtype) else c)])
    linear = detect_linear_equation(expr, [var])
    return bool(linear) and isinstance(linear[0], tirx.IntImm) and int(linear[0]) == 1


def _retyped(buf) -> bool:
    """Whether TVM's legalisation stores `buf`'s type as another (bfloat16, float8): it rebuilds such
    buffers without their annotations, and retypes values but not the variables bound to them."""
    return str(buf.ty.dtype).startswith(("bfloat", "float8", "float4"))


def _widened(seq: tirx.SeqStmt) -> tirx.Stmt:
    """Each block that every read converts to one wider float type (a dot's float16 operand tiles,
    read as float32) stored in that type: converted once per element where it is filled, not at each
    of its reads (a matrix product's tile element is read once per row or column of the other)."""
    stmts = list(seq.seq)
    for i, alloc in enumerate(stmts):
        if isinstance(alloc, tirx.AllocBuffer) and (wide := _wider(alloc.buffer, stmts[i + 1:])):
            stmts[i:] = _retype(alloc, stmts[i + 1:], wide)
    unchanged = all(a.same_as(b) for a, b in zip(stmts, seq.seq))
    return seq if unchanged else nests.seq(stmts)


def _wider(buf, stmts: list):
    """The float type wider than `buf`'s that every read of `buf` in `stmts` is converted to, if one."""
    dtype = tvm.DataType(str(buf.ty.dtype))
    if "float" not in str(dtype) or dtype.lanes != 1 or buf.scope() != "local":
        return None
    reads, casts = [], set()

    def cast(c):
        if isinstance(c.value, tvm.ir.TensorLoad) and c.value.source.same_as(buf):
            casts.add(str(c.ty.dtype))
            reads.append(c)
    loads = []
    for stmt in stmts:   # one walk: the casts of `buf`'s loads, and every load of it
        tvm_ffi.structural_walk(stmt, [(tirx.Cast, cast), (tvm.ir.TensorLoad,
                                                          lambda e: loads.append(e) if e.source.same_as(buf) else None)])
    if not loads or len(loads) != len(reads) or len(casts) != 1:
        return None
    wide = next(iter(casts))
    return wide if "float" in wide and tvm.DataType(wide).bits > dtype.bits else None


def _retype(alloc: tirx.AllocBuffer, stmts: list, dtype: str) -> list:
    """`alloc` and the statements in its scope with its buffer of type `dtype` (_widened)."""
    old = alloc.buffer
    new = tirx.decl_buffer(old.ty.shape, dtype, old.name, scope="local")

    def cast(c):
        if isinstance(c.value, tvm.ir.TensorLoad) and c.value.source.same_as(old):
            return new[tuple(c.value.indices)]
        return c

    def store(st):
        return tirx.BufferStore(new, tirx.Cast(dtype, st.value), list(st.indices)) if st.buffer.same_as(old) else st
    rest = [tvm_ffi.structural_map(s, [(tirx.Cast, cast), (tirx.BufferStore, store)]) for s in stmts]
    return [tirx.AllocBuffer(new, annotations=alloc.annotations)] + rest


def _fuse(seq: tirx.SeqStmt) -> tirx.Stmt:
    """Adjacent element-wise nests over one shape as one nest, each element computed start to end
    (a load's value no longer stored to a buffer and read back: a value of its own, _scalarised)."""
    out = []
    for stmt in seq.seq:
        j = len(out) - 1
        while j >= 0 and isinstance(out[j], tirx.AllocBuffer):
            j -= 1
        fused = None
        if j >= 0 and _elementwise(out[j]):
            fused = _fused_pair(out[j], stmt) if _elementwise(stmt) else _filled_in(out[j], stmt)
        if fused is None:
            out.append(stmt)
        else:   # a buffer declared between them now ahead of both: the fused nest may fill and read it
            out[j:] = out[j + 1:] + [fused]
    if len(out) == len(seq.seq):
        return seq
    return nests.seq(_scalarised(out))


def _scalarised(stmts: list) -> list:
    """`stmts`, where a buffer that one nest alone fills and reads, each element only at its own, is
    a value per element (a Bind: in a register, not stored and loaded back)."""
    for alloc in [s for s in stmts if isinstance(s, tirx.AllocBuffer)]:
        users = [i for i, stmt in enumerate(stmts) if not isinstance(stmt, tirx.AllocBuffer) and
                 alloc.buffer in _accesses(stmt)]
        value = _as_value(stmts[users[0]], alloc.buffer) if len(users) == 1 else None
        if value is not None:
            stmts[users[0]] = value
            stmts = [s for s in stmts if not s.same_as(alloc)]
    return stmts


def _as_value(nest, buf):
    """The element-wise `nest` with `buf` a value, where its first access is the one store to it, at
    the nest's own element, and every read is at that element; else None."""
    if not _elementwise(nest) or _retyped(buf):
        return None
    loops = nests.nest(nest)
    index = [loop.loop_var for loop in loops]
    body = _flat(loops[-1].body)
    touching = [j for j, stmt in enumerate(body) if buf in _accesses(stmt)]
    store = body[touching[0]]
    if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(buf) or \
            any(b.same_as(buf) or _retyped(b) for b in _accesses(tirx.Evaluate(store.value))) or \
            any(c.op.name != "prim.if_then_else" for c in calls(tirx.Evaluate(store.value), "")):
        # TVM's legalisation misses a retyped buffer read in a bound value, and a math call's
        # expansion (fast_math: a Let of its own) would be bound twice where TVM inlines the value
        return None
    later = [a for stmt in body[touching[0] + 1:] for a in _accesses(stmt).get(buf, [])]
    if not _same(list(store.indices), index) or any(write or not _same(where, index) for write, where in later):
        return None
    value = tirx.Var(buf.name, store.value.ty)
    rest = tvm_ffi.structural_map(nests.seq(body[touching[0] + 1:]), [(
        tvm.ir.TensorLoad, lambda e: value if e.source.same_as(buf) else e)]) if touching[0] + 1 < len(body) else None
    new = nests.seq(body[:touching[0]] + [tirx.Bind(value, store.value)] + (_flat(rest) if rest is not None else []))
    for loop in reversed(loops):
        new = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, new, annotations=loop.annotations)
    return new


def _elementwise(stmt) -> bool:
    """Whether `stmt` is a block nest of independent elements: constant extents, one body, no
    reduction, no atomics, no loop inside."""
    if not isinstance(stmt, tirx.For) or BLOCK not in stmt.annotations or ATOMIC in stmt.annotations:
        return False
    nest = nests.nest(stmt)
    return all(isinstance(loop.extent, tirx.IntImm) for loop in nest) and \
        not any(isinstance(s, tirx.For) for s in nests.walk(nest[-1].body))


def _fused_pair(a: tirx.For, b: tirx.For):
    """Nests `a` then `b` as one nest (a's loops, then b's body after a's), or None where an element
    of one reads what the other writes at another element (or may: a memory write in one and any
    access of that memory in the other, as the index may repeat)."""
    outer, inner = nests.nest(a), nests.nest(b)
    if [int(x.extent) for x in outer] != [int(y.extent) for y in inner]:
        return None
    body = inner[-1].body
    for x, y in zip(outer, inner):
        body = nests.substitute(body, y.loop_var, x.loop_var)
    index = [loop.loop_var for loop in outer]
    first, then = _accesses(outer[-1].body), _accesses(body)
    for buf in first.keys() & then.keys():
        every = first[buf] + then[buf]
        if not any(write for write, _ in every):
            continue
        if buf.scope() != "local" or not all(_same(where, index) for _, where in every):
            return None
    new = nests.seq(_flat(outer[-1].body) + _flat(body))
    for loop in reversed(outer):
        new = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, new, annotations=loop.annotations)
    return new


def _filled_in(fill: tirx.For, nest) -> tirx.Stmt | None:
    """A rank-1 element-wise nest `fill` followed by a reduction to a scalar over the same extent as
    one: each step of the reduced loop computes its element first (softmax's row loaded and its
    maximum taken in one pass, not two), or None where the reduction reads what the fill writes
    elsewhere than at its own step, or its start reads it at all."""
    if not isinstance(nest, tirx.For) or BLOCK not in nest.annotations or int(nest.annotations[BLOCK]) != 1 or \
            not isinstance(nest.extent, tirx.IntImm) or int(nest.extent) != 1 or len(nests.nest(fill)) != 1:
        return None
    loop = nests.reduction_loop(nest.body)
    if loop is None or not isinstance(loop.extent, tirx.IntImm) or int(loop.extent) != int(fill.extent) or \
            ATOMIC in nest.annotations or int(loop.extent) % LANES or int(loop.extent) < 2 * LANES:
        return None   # a reduction _lane_reduction leaves a scalar loop would take the fill's vectors with it
    body = nests.substitute(fill.body, fill.loop_var, loop.loop_var)
    first, then = _accesses(body), _accesses(loop.body)
    inits = _flat(nest.body)[:-1]
    written = {buf for buf, every in first.items() if any(write for write, _ in every)}
    if any(buf in written for init in inits for buf in _accesses(init)):
        return None
    for buf in first.keys() & then.keys():
        every = first[buf] + then[buf]
        if any(write for write, _ in every) and (buf.scope() != "local" or
                                                 not all(_same(where, [loop.loop_var]) for _, where in every)):
            return None
    steps = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, nests.seq(_flat(body) + _flat(loop.body)),
                     annotations=loop.annotations)
    return tirx.For(nest.loop_var, nest.min, nest.extent, nest.kind, nests.seq(inits + [steps]),
                    annotations=nest.annotations)


def _accesses(stmt) -> dict:
    """Each buffer `stmt` reads or writes: [(is a write, index)]."""
    found: dict = {}
    tvm_ffi.structural_walk(stmt, (tvm.ir.TensorLoad, lambda e: found.setdefault(e.source, []).append(
        (False, list(e.indices)))))
    for s in nests.walk(stmt):
        if isinstance(s, tirx.BufferStore):
            found.setdefault(s.buffer, []).append((True, list(s.indices)))
    return found


def _same(index: list, loop_vars: list) -> bool:
    return len(index) == len(loop_vars) and all(isinstance(i, tvm.ir.Var) and i.same_as(v)
                                                for i, v in zip(index, loop_vars))


def _flat(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


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
        blocked = _row_blocked(nest[0], inits, reduction, inner) if len(nest) == 2 else None
        if blocked is not None:
            return blocked
        steps = tirx.For(reduction.loop_var, reduction.min, reduction.extent, reduction.kind,
                         _vector_loop(inner.loop_var, inner.extent.value, reduction.body),
                         annotations=reduction.annotations)
        new = nests.seq(([_vector_loop(inner.loop_var, inner.extent.value, nests.seq(inits))] if inits else [])
                           + [steps])
    else:
        new = _vector_loop(inner.loop_var, inner.extent.value, body)
    for loop in reversed(nest[:-1]):
        new = _unwrapped_loop(loop, new)
    return new


def _unwrapped_loop(loop: tirx.For, body: tirx.Stmt) -> tirx.Stmt:
    """`loop` over `body`, split in two where a modulo wraps its index around (a tile's `% M` rows,
    a division per row and step of a K loop): where no row of the block wraps, each modulo the
    index itself, decided once for the loop (_unwrapped)."""
    def over(stmt):
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, stmt, annotations=loop.annotations)
    if not isinstance(loop.extent, tirx.IntImm) or not isinstance(loop.min, tirx.IntImm) or int(loop.min) != 0:
        return over(body)
    plain, holds = _unwrapped(body, loop.loop_var, int(loop.extent))
    inside = {s.loop_var for s in nests.walk(body) if isinstance(s, tirx.For)} | \
        {s.var for s in nests.walk(body) if isinstance(s, tirx.Bind)}
    if holds is None or any(uses(holds, v) for v in inside):
        return over(body)   # no such modulo, or one whose start is known only inside the loop
    return tirx.IfThenElse(holds, over(plain), over(body))


def _row_blocked(row: tirx.For, inits: list, reduction: tirx.For, inner: tirx.For):
    """A rank-2 reduction nest with several rows inside each step of its reduced loop (its results
    are independent, so any order is theirs): a step updates rows x vectors of results, which stay in
    registers across the loop, and reads the other operand's vectors once for all of them (a matrix
    product's inner kernel; a row at a time, each step loaded and stored the results). None where
    the rows do not divide."""
    rows = _rows(row.extent, int(inner.extent))
    if rows is None:
        return None
    dtype = row.loop_var.ty.dtype
    outer = tirx.Var(f"{row.loop_var.name}_rows", dtype)
    unrolled = rows * -(-int(inner.extent) // LANES) <= ACCUMULATORS

    def each_row(stmt, kind, unroll=False):
        within = tirx.Var(f"{row.loop_var.name}_row", dtype)
        at = nests.substitute(stmt, row.loop_var, outer * rows + within)
        return tirx.For(within, nests.int_imm(0), nests.int_imm(rows), kind,
                        _vector_loop(inner.loop_var, int(inner.extent), at, unroll))
    steps = tirx.For(reduction.loop_var, reduction.min, reduction.extent, reduction.kind,
                     each_row(reduction.body, tirx.ForKind.UNROLLED, unrolled), annotations=reduction.annotations)
    body = nests.seq(([each_row(nests.seq(inits), tirx.ForKind.SERIAL)] if inits else []) + [steps])
    return tirx.For(outer, nests.int_imm(0), nests.int_imm(int(row.extent) // rows), tirx.ForKind.SERIAL, body,
                    annotations=row.annotations)


def _rows(extent, columns: int):
    """The rows a step of a rank-2 reduction updates: the most (up to 8) that divide `extent` and
    keep their results in ACCUMULATORS vectors, else ROWS where they divide; None where none does."""
    if not isinstance(extent, tirx.IntImm):
        return None
    vectors = -(-columns // LANES)
    fits = [r for r in (8, 4, 2) if int(extent) % r == 0 and r * vectors <= ACCUMULATORS and r <= int(extent)]
    if fits:
        return fits[0]
    return ROWS if int(extent) % ROWS == 0 and int(extent) >= ROWS else None


def _vector_loop(var, extent: int, body: tirx.Stmt, unroll: bool = False) -> tirx.Stmt:
    """`body` for var in range(extent), vectorised (in vectors of LANES when longer), with fresh loop
    vars; `unroll`: the vectors unrolled (a register each)."""
    body = _by_reciprocal(body, var)
    lane = tirx.Var(f"{var.name}_lane", var.ty.dtype)
    if extent <= LANES or extent % LANES:
        return _wrap_split(lane, extent, nests.substitute(body, var, lane))
    chunk = tirx.Var(f"{var.name}_vec", var.ty.dtype)
    return tirx.For(chunk, nests.int_imm(0), nests.int_imm(extent // LANES),
                    tirx.ForKind.UNROLLED if unroll else tirx.ForKind.SERIAL,
                    _wrap_split(lane, LANES, nests.substitute(body, var, chunk * LANES + lane)))


def _wrap_split(lane, extent: int, body: tirx.Stmt) -> tirx.Stmt:
    """The masked vector loop (masked_vector) of `body`, where an index wraps around by a modulo
    (`(start + arange) % N`, a gather) split in two: the vectors that do not wrap, every modulo a
    scalar plus the lane (contiguous: a vector load), and the others as they are."""
    plain, holds = _unwrapped(body, lane, extent)
    if holds is None:
        return masked_vector(lane, extent, body, ON_STACK)
    return tirx.IfThenElse(holds, masked_vector(lane, extent, plain, ON_STACK), masked_vector(lane, extent, body, ON_STACK))


def _unwrapped(node, lane, extent: int):
    """(`node` with each modulo of a value that grows by one with `lane`, by a divisor that does not
    depend on it, as that value, the condition under which that is exact for lanes 0 .. extent-1, or
    None where there is no such modulo). Exact where the first lane's value is not negative and the
    last's below the divisor: no division at run time (a modulo per vector cost more than the gather)."""
    found = []

    def unwrap(e):
        if not uses(e.a, lane) or uses(e.b, lane) or "int" not in str(e.ty.dtype) or not _unit_stride(e.a, lane):
            return e
        start = nests.substitute(e.a, lane, tirx.const(0, str(lane.ty.dtype)))
        last = nests.substitute(e.a, lane, tirx.const(extent - 1, str(lane.ty.dtype)))
        found.append(tirx.And(start >= tirx.const(0, str(e.ty.dtype)), last < e.b))
        return e.a
    new = tvm_ffi.structural_map(node, [(tirx.Mod, unwrap), (tirx.FloorMod, unwrap)])
    return new, functools.reduce(tirx.And, found) if found else None


def _by_reciprocal(body: tirx.Stmt, var) -> tirx.Stmt:
    """Floating-point divisions by a value the same for every element (softmax's sum) as products
    with its reciprocal, computed once: a vector division takes a multiply's time ten times over.
    Triton's own `/` on float32 is approximate too (div.full.f32, 2 ulp)."""
    def divide(e):
        if "float" not in str(e.ty.dtype) or uses(e.b, var):
            return e
        return e.a * (tirx.const(1, str(e.ty.dtype)) / e.b)
    return tvm_ffi.structural_map(body, [(tirx.Div, divide)])


def _lane_reduction(nest: tirx.For, loop: tirx.For) -> tirx.Stmt:
    """A reduction to a scalar in CHAINS vectors of LANES partial results, then combined: LLVM does
    not vectorise a floating-point sum on its own (it would reorder the additions), and one vector
    would wait for its previous step at each (an add's latency is four of its issue slots)."""
    reducer = loop.annotations[REDUCE]
    extent = int(loop.extent)
    if not isinstance(reducer, tirx.CommReducer) or extent % LANES or extent < 2 * LANES:
        return nest
    chains = CHAINS if extent % (CHAINS * LANES) == 0 and extent >= 2 * CHAINS * LANES else 1
    body = nest.body
    inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
    # the results' stores: those not at the step's own element (a fill's, _filled_in)
    stores = [st for st in _flat(loop.body) if isinstance(st, tirx.BufferStore) and
              not any(uses(i, loop.loop_var) for i in st.indices)]
    if len(stores) != len(reducer.lhs):
        return nest
    bufs = [store.buffer for store in stores]
    partials = [tirx.decl_buffer((chains * LANES,), b.ty.dtype, f"{b.name}_lanes", scope="local") for b in bufs]
    lane, chunk, chain = tirx.Var("lane", "int32"), tirx.Var("r_vec", "int32"), tirx.Var("chain", "int32")
    to_lanes = {b: p for b, p in zip(bufs, partials)}
    at = chain * LANES + lane
    # the index substituted, not bound: a fill's masks (_filled_in) then show that they depend on the lane
    step = tvm_ffi.structural_map(
        nests.substitute(loop.body, loop.loop_var, (chunk * chains + chain) * LANES + lane),
        [(tvm.ir.TensorLoad, lambda e: to_lanes[e.source][at] if e.source in to_lanes else e),
         (tirx.BufferStore, lambda st: tirx.BufferStore(to_lanes[st.buffer], st.value, [at])
          if st.buffer in to_lanes else st)])
    every = tirx.Var("lane_all", "int32")   # each loop a variable of its own (TVM bounds a variable once)
    start = tirx.For(every, nests.int_imm(0), nests.int_imm(chains * LANES), tirx.ForKind.VECTORIZED, nests.seq(
        [tirx.BufferStore(p, init, [every]) for p, init in zip(partials, reducer.identity_element)]))
    main = tirx.For(chunk, nests.int_imm(0), nests.int_imm(extent // (chains * LANES)), tirx.ForKind.SERIAL,
                    tirx.For(chain, nests.int_imm(0), nests.int_imm(chains), tirx.ForKind.UNROLLED,
                             masked_vector(lane, LANES, step, ON_STACK)))
    folds = []   # the chains into the first, lane by lane (a vector each)
    for k in range(1, chains):
        v = tirx.Var(f"lane_{k}", "int32")
        folds.append(tirx.For(v, nests.int_imm(0), nests.int_imm(LANES), tirx.ForKind.VECTORIZED, _combined(
            reducer, partials, [p[v] for p in partials], [p[k * LANES + v] for p in partials], partials, v)))
    # the lanes combined in order
    last = tirx.Var("lane_last", "int32")
    finish = tirx.For(last, nests.int_imm(0), nests.int_imm(LANES), tirx.ForKind.SERIAL, _combined(
        reducer, bufs, [b[0] for b in bufs], [p[last] for p in partials], bufs, nests.int_imm(0)))
    return nests.seq([*inits, *[tirx.AllocBuffer(p) for p in partials], start, main, *folds, finish])


def _combined(reducer, names, lhs: list, rhs: list, into: list, index) -> tirx.Stmt:
    """`reducer` of values `lhs` and `rhs` stored to buffers `into` at `index`: every result bound
    from the old values before any is stored (a reducer of several values reads them all)."""
    binding = {**dict(zip(reducer.lhs, lhs)), **dict(zip(reducer.rhs, rhs))}
    results = [tvm_ffi.structural_map(r, [(tvm.ir.Var, lambda v: binding.get(v, v))]) for r in reducer.result]
    finals = [tirx.Var(f"{b.name}_next", b.ty.dtype) for b in names]
    return nests.seq([tirx.Bind(f, r) for f, r in zip(finals, results)] +
                     [tirx.BufferStore(b, f, [index]) for b, f in zip(into, finals)])
