"""The block program on a GPU (schedule.py): the grid's axes bound to blockIdx.x/y/z, a thread block
per program, the program's body run by num_warps * 32 threads. Each block nest's elements are spread
over them (element `it * threads + tx`); in a dot, each step of the reduced loop runs over all of a
thread's elements; a reduction to a scalar ends in TVM's thread all-reduce (warp shuffles); a value
each thread reads and writes only at its own elements lives in its registers, the rest in shared
memory (dynamic shared memory past 48 KB); a write to memory outside any nest (a scalar store) is
made by thread 0 alone. A float16/bfloat16 dot runs on tensor cores (mma.py) where its tile allows:
its accumulator's registers, and those of every nest that shares them, are then spread in the
instruction's fragment layout instead of `it * threads + tx`, and copied to shared memory only before
a nest that reads them across threads. The nests filling its operand tiles from a tensor that starts
16-byte aligned (and those sharing registers with them: the pointer blocks) give each thread runs of
16 bytes along the inner axis (`Runs`), each copied by one vector load and store where, at run time,
its elements are unmasked and contiguous."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import loops as nests
from . import mma
from .emit import BLOCK, PROGRAM, REDUCE

MAX_UNROLL = 128            # a nest of at most this many rounds per thread is unrolled
STATIC_SHARED = 48 * 1024   # the most static shared memory a CUDA kernel may have


def schedule(func: tirx.PrimFunc, num_warps: int, tensor_cores: bool = True, aligned=()) -> tirx.PrimFunc:
    """`func` for thread blocks of num_warps * 32 threads; `tensor_cores`: the target has mma.sync
    m16n8k16 (sm_80 on), for the dots emit.py marked; `aligned`: the tensors (parameter names) whose
    memory starts 16-byte aligned at every launch (the launch key says so), read 16 bytes at a time."""
    params = [p for p in func.params if hasattr(p.ty, "storage_scope")]   # the tensors' buffers
    threads = num_warps * 32
    body = func.body
    if tensor_cores:
        body = _padded_operands(body, threads)
    dots = _tensor_core_dots(body, threads) if tensor_cores else {}
    local, mirrored = _own_element_buffers(body, threads, {d.c for d, _ in dots.values()})
    layouts, family = _mma_layouts(body, local, dots)
    operands = {b for d, _ in dots.values() for b in (d.a, d.b)}
    aligned = {p for p in params if p.name in aligned}
    runs, fills, runs_of = _run_layouts(body, local, operands, layouts, threads, aligned)
    for b in runs_of:   # one register a run: its first offset
        local[b] = tirx.decl_buffer((int(local[b].ty.shape[0]) // VECTOR,), "int64", b.name + "_runs",
                                    scope="local")
    gpu = _Gpu(threads, params, local, dots, {**layouts, **runs}, {b: family[b] for b in mirrored}, fills, runs_of)
    return func.with_body(_dynamic_shared_if_large(gpu.stmt(body)))


def _tensor_core_dots(body: tirx.Stmt, threads: int) -> dict:
    """The dot nests tensor cores make: outermost loop -> (mma.Dot, its mma.Layout)."""
    found = {}
    for s in nests.walk(body):
        if isinstance(s, tirx.For) and BLOCK in s.annotations:
            d = mma.dot(nests.nest(s))
            lay = d and mma.usable(d, threads)
            if lay is not None:
                found[s] = (d, lay)
    return found


def _padded_operands(body: tirx.Stmt, threads: int) -> tirx.Stmt:
    """The shared operands of tensor-core dots with padded rows (mma.PAD), for ldmatrix."""
    operands = {b for d, _ in _tensor_core_dots(body, threads).values() for b in (d.a, d.b)}
    pads = {b: mma.padded(b) for b in operands}
    return tvm_ffi.structural_map(body, [(tvm.ir.Var, lambda v: pads.get(v, v))]) if pads else body


def _mma_layouts(body: tirx.Stmt, local: dict, dots: dict) -> dict:
    """The block nests that run in a tensor-core dot's layout: those reading or writing a register
    buffer that such a nest does, from the dots' accumulators on (a register buffer is touched only
    at each thread's own elements, so all the nests touching it must agree on whose they are).
    Nest (its outermost loop) -> mma.Layout, and buffer -> mma.Layout; other nests keep the linear one."""
    touched = {}
    for s in nests.walk(body):
        if isinstance(s, tirx.For) and BLOCK in s.annotations:
            own = [loop.loop_var for loop in nests.nest(s)]
            touched[s] = {b for b, indices in _all_accesses(s) if b in local and _same(indices, own)}
    family = {d.c: lay for d, lay in dots.values() if d.c in local}
    grown = True
    while grown:
        grown = False
        for bufs in touched.values():
            lay = next((family[b] for b in bufs if b in family), None)
            if lay is not None and not bufs <= family.keys():
                family.update({b: lay for b in bufs})
                grown = True
    return {s: next(family[b] for b in bufs if b in family) for s, bufs in touched.items()
            if any(b in family for b in bufs)}, family


VECTOR_BYTES = 16          # the widest load a thread makes: ld.global.v4.b32
VECTOR = 8                 # a run: 16 bytes of a tensor-core operand (float16, bfloat16)


@dataclasses.dataclass(frozen=True)
class Runs:
    """A block nest's elements over the threads in runs of `width` consecutive elements along its
    inner axis: register `it` of thread tx holds element ((it // width) * threads + tx) * width + it % width,
    so a run is one vector access where the memory behind it is contiguous."""
    shape: tuple
    threads: int
    width: int

    @property
    def rounds(self) -> int:
        return functools.reduce(operator.mul, self.shape, 1) // self.threads

    def at(self, it, tx) -> tuple:
        """The index of register `it` of thread tx: its run's place in the grid of runs, then its
        element's in the run (spelled so that TVM's simplifier sees elements of a run one column apart)."""
        run = mma._div(it, self.width) * self.threads + tx
        runs = (*self.shape[:-1], self.shape[-1] // self.width)
        index, stride = [], functools.reduce(operator.mul, runs, 1)
        for extent in runs:
            stride //= extent
            index.append(mma._mod(mma._div(run, stride), extent))
        return (*index[:-1], index[-1] * self.width + mma._mod(it, self.width))


def _run_layouts(body: tirx.Stmt, local: dict, operands: set, taken: dict, threads: int,
                 aligned: set) -> tuple[dict, set, set]:
    """The nests that fill a tensor-core operand tile from an `aligned` tensor (`_masked_load`), with every nest
    sharing registers with them, in `Runs` of 16 bytes of the operand (so that a run is one vector
    load), where the shape divides into runs over the threads and no nest of the group is already in
    a tensor-core layout (`taken`). Nest -> its Runs, the set of the filling nests, and the pointer
    blocks among their registers whose runs are contiguous (`_contiguous_runs`)."""
    touched = {s: {b for b, i in _all_accesses(s) if b in local and _same(i, [lp.loop_var for lp in nests.nest(s)])}
               for s in nests.walk(body) if isinstance(s, tirx.For) and BLOCK in s.annotations}
    out, fills, runs_of = {}, set(), set()
    for s in touched:
        store = nests.nest(s)[-1].body
        load = isinstance(store, tirx.BufferStore) and store.buffer in operands and _masked_load(store.value)
        if not load or load[1].source not in aligned or str(load[1].ty.dtype) != str(store.buffer.ty.dtype):
            continue
        if s in out:   # in the group of another fill
            fills.add(s)
            continue
        group, bufs, grown = {s}, set(touched[s]), True
        while grown:   # the nests touching the group's registers, and theirs
            more = {t for t, b in touched.items() if b & bufs} - group
            group |= more
            bufs |= {b for t in more for b in touched[t]}
            grown = bool(more)
        shape = tuple(int(lp.extent) for lp in nests.nest(s))
        width = VECTOR_BYTES * 8 // tvm.runtime.DataType(str(store.buffer.ty.dtype)).bits
        if shape[-1] % width or functools.reduce(operator.mul, shape, 1) % (threads * width) or group & taken.keys():
            continue
        out.update({t: Runs(shape, threads, width) for t in group})
        fills.add(s)
        runs_of.update(_contiguous_runs(group, {b for b in bufs if str(b.ty.dtype) == "int64"}, out[s]))
    return out, fills, runs_of


def _contiguous_runs(group: set, candidates: set, lay: Runs) -> set:
    """The pointer blocks (int64 register buffers of the nests `group`, in `lay`) whose every run holds
    consecutive offsets p, p + 1, ..., p + width - 1 at every write, by induction: each write's value at
    element v of a run, less its value at element 0, simplifies to v when the group's blocks read there
    are taken to be so. A thread then keeps one offset a run (a unit stride specialised, equal_to_1;
    int32 offsets are taken not to overflow, as Triton's contiguity analysis does)."""
    run, tx = tirx.Var("run", "int32"), tirx.Var("tx", "int32")
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(run, tvm.ir.Range(0, lay.rounds // lay.width))
    analyzer.bind(tx, tvm.ir.Range(0, lay.threads))
    starts = {b: tirx.Var(b.name + "_start", "int64") for b in candidates}
    writes = [(t, w) for t in group for w in nests.walk(t) if isinstance(w, tirx.BufferStore)]
    guarded = {w.buffer for t in group for c in nests.walk(t) if isinstance(c, tirx.IfThenElse)
               for w in nests.walk(c) if isinstance(w, tirx.BufferStore)}   # some elements of a run written, not all

    def value_at(nest, store, v, held):
        own = [loop.loop_var for loop in nest]

        def load(expr):   # a held block at the element's own index: its run's start + v
            return starts[expr.source] + v if expr.source in held and _same(expr.indices, own) else expr
        value = tvm_ffi.structural_map(store.value, [(tvm.ir.TensorLoad, load)])
        for var, index in zip(own, lay.at(run * lay.width + v, tx)):
            value = nests.substitute(value, var, index)
        return value
    held, shrunk = set(candidates) - guarded, True
    while shrunk:
        bad = {w.buffer for t, w in writes if w.buffer in held and not all(
            analyzer.can_prove_equal(value_at(nests.nest(t), w, v, held) - value_at(nests.nest(t), w, 0, held), v)
            for v in range(1, lay.width))}
        held -= bad
        shrunk = bool(bad)
    return held


def _masked_load(value):
    """(mask or None, the load, other) of an element of `tl.load` from a tensor, else None."""
    if isinstance(value, tvm.ir.Call) and value.op.name == "prim.if_then_else":
        mask, load, other = value.args
    else:
        mask, load, other = None, value, None
    if isinstance(load, tvm.ir.TensorLoad) and len(load.indices) == 1 and load.source.ty.storage_scope == "global":
        return mask, load, other
    return None


def _multiple(load, width: int) -> tirx.PrimExpr:
    """`load`'s index spelled so that TVM's code generator sees its address (index + the tensor's
    elem_offset) is a multiple of `width` elements, which it needs to make one vector access (true
    where it is used: under `_aligned`)."""
    index, offset = load.indices[0], load.source.ty.elem_offset
    offset = tirx.Cast(str(index.ty.dtype), offset) if str(offset.ty.dtype) != str(index.ty.dtype) else offset
    return tirx.floordiv(index + offset, width) * width - offset


def _aligned(load) -> tirx.PrimExpr:
    """Whether the address of `load`'s element (of a tensor whose memory starts 16-byte aligned) is a
    multiple of 16 bytes. (A kernel reading a pointer's bits to check its start instead kept every
    register array of the 128 x 256 matmul in local memory: ptxas gave it 48 registers, 3.5 KB of stack.)"""
    index, offset = load.indices[0], load.source.ty.elem_offset
    offset = tirx.Cast(str(index.ty.dtype), offset) if str(offset.ty.dtype) != str(index.ty.dtype) else offset
    width = VECTOR_BYTES * 8 // tvm.runtime.DataType(str(load.ty.dtype)).bits
    return tirx.EQ(tirx.bitwise_and(index + offset, tirx.const(width - 1, str(index.ty.dtype))),
                   tirx.const(0, str(index.ty.dtype)))


def _same(indices, loop_vars) -> bool:
    return len(indices) == len(loop_vars) and all(i.same_as(v) for i, v in zip(indices, loop_vars))


class _Gpu:
    """Rewrites a block program's statements for a thread block of `threads` threads."""

    def __init__(self, threads: int, params: list, local: dict, dots: dict, layouts: dict, mirrored: dict,
                 fills: set = frozenset(), runs_of: set = frozenset()):
        self.threads = threads
        self.params = params
        self.local = local     # shared buffer -> the registers holding each thread's own elements
        self.dots = dots       # tensor-core dots: nest -> (mma.Dot, mma.Layout)
        self.layouts = layouts   # the nests whose elements are spread in an mma.Layout: nest -> the layout
        self.mirrored = mirrored   # register buffers also copied to shared memory for nests reading across threads
        self.fills = fills     # the nests filling a tensor-core operand from memory, in layouts' Runs
        self.runs_of = runs_of   # register buffers holding only each run's first offset (_contiguous_runs)
        self.tx = tirx.Var("tx", "int32")
        self.inside = False    # inside a block nest: each thread writes its own elements

    def stmt(self, s: tirx.Stmt) -> tirx.Stmt:
        if isinstance(s, tirx.For):
            return self.loop(s)
        if isinstance(s, tirx.SeqStmt):
            return nests.seq([self.stmt(x) for x in s.seq])
        if isinstance(s, tirx.IfThenElse):
            return tirx.IfThenElse(s.condition, self.stmt(s.then_case),
                                   None if s.else_case is None else self.stmt(s.else_case))
        if isinstance(s, tirx.AllocBuffer) and s.buffer in self.local:
            own = tirx.AllocBuffer(self.local[s.buffer])
            return nests.seq([own, s]) if s.buffer in self.mirrored else own
        if not self.inside and (isinstance(s, tirx.Evaluate) or isinstance(s, tirx.BufferStore) and any(
                s.buffer.same_as(p) for p in self.params)):
            return tirx.IfThenElse(tirx.EQ(self.tx, 0), s, None)   # one write per program, not one per thread
        return s

    def loop(self, loop: tirx.For) -> tirx.Stmt:
        notes = loop.annotations
        if PROGRAM in notes:
            return self.programs(loop)
        if BLOCK in notes:
            return self.spread(loop)
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, self.stmt(loop.body),
                        annotations=loop.annotations)

    def programs(self, outer: tirx.For) -> tirx.Stmt:
        loops = [outer, outer.body, outer.body.body]          # axes 2, 1, 0
        body = tirx.For(self.tx, nests.int_imm(0), nests.int_imm(self.threads), tirx.ForKind.THREAD_BINDING, self.stmt(loops[2].body),
                        thread_binding=tirx.IterVar(None, self.tx, tirx.IterVar.ThreadIndex, "threadIdx.x"))
        for loop, tag in zip(reversed(loops), ("blockIdx.x", "blockIdx.y", "blockIdx.z")):
            body = tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.THREAD_BINDING, body,
                            thread_binding=tirx.IterVar(None, loop.loop_var, tirx.IterVar.ThreadIndex, tag))
        return body

    def spread(self, outer: tirx.For) -> tirx.Stmt:
        """A block nest's elements over the threads: thread tx computes elements tx, tx + threads, ...
        In a reduction nest (a dot), each step of the reduced loop runs over all the thread's elements
        (the step's shared operand is read once for them all, its results stay in registers)."""
        own = [loop.loop_var for loop in nests.nest(outer)]
        copies = [self.mirror(b) for b in self.mirrored
                  if any(buf.same_as(b) and not _same(indices, own) for buf, indices in _all_accesses(outer))]
        return nests.seq([*copies, self.spread_nest(outer)])

    def spread_nest(self, outer: tirx.For) -> tirx.Stmt:
        nest = nests.nest(outer)
        if outer in self.dots:
            return self.tensor_core_dot(*self.dots[outer])
        if outer in self.fills:
            return self.vector_fill(nest, self.layouts[outer])
        body = nest[-1].body
        total = functools.reduce(operator.mul, [loop.extent.value for loop in nest], 1)
        if total == 1 and nests.reduction_loop(body) is not None:
            return self.all_reduce(body)
        last = body.seq[-1] if isinstance(body, tirx.SeqStmt) else body
        if total > self.threads and isinstance(last, tirx.For) and REDUCE in last.annotations:
            inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
            steps = tirx.For(last.loop_var, last.min, last.extent, tirx.ForKind.SERIAL,
                             self.each_element(nest, last.body), annotations=last.annotations)
            return nests.seq(([self.each_element(nest, nests.seq(inits))] if inits else []) + [steps])
        return self.each_element(nest, body)

    def each_element(self, nest: list, body: tirx.Stmt) -> tirx.Stmt:
        """`body` for each of the thread's elements of the nest (the nest's loop vars bound to each): elements
        tx, tx + threads, ..., or those of its mma.Layout for a nest sharing registers with a tensor-core dot."""
        extents = [loop.extent.value for loop in nest]
        total = functools.reduce(operator.mul, extents, 1)
        lay = self.layouts.get(nest[0])
        rounds = lay.rounds if lay is not None else -(-total // self.threads)
        it = tirx.Var("it", "int32")
        flat = it * self.threads + self.tx if rounds > 1 else self.tx
        binds, stride = [], total
        at = lay.at(it if rounds > 1 else 0, self.tx) if lay is not None else None
        for axis, (loop, extent) in enumerate(zip(nest, extents)):   # fresh vars: a body may be placed twice
            stride //= extent
            var = tirx.Var(loop.loop_var.name, loop.loop_var.ty.dtype)
            body = nests.substitute(body, loop.loop_var, var)
            index = at[axis] if at is not None else tirx.floormod(tirx.floordiv(flat, stride), extent)
            binds.append(tirx.Bind(var, index))
        self.inside = True
        try:
            own = [bind.var for bind in binds]
            body = nests.seq([*binds, self.own_elements(self.stmt(body), it if rounds > 1 else 0, own)])
        finally:
            self.inside = False
        if lay is None and total % self.threads:
            body = tirx.IfThenElse(flat < total, body, None)
        if rounds > 1:   # unrolled: a thread's own elements are then registers, not local memory
            kind = tirx.ForKind.UNROLLED if rounds <= MAX_UNROLL else tirx.ForKind.SERIAL
            body = tirx.For(it, nests.int_imm(0), nests.int_imm(rounds), kind, body)
        return body

    def own_elements(self, body: tirx.Stmt, slot, own: list) -> tirx.Stmt:
        """Reads and writes of a buffer each thread keeps its own elements of, as its register `slot`
        (those at its own index `own`, for a buffer also mirrored in shared memory)."""
        if not self.local:
            return body

        def registers(buf, indices):
            new = self.local.get(buf)
            return None if new is None or buf in self.mirrored and not _same(indices, own) else new

        def load(expr):
            new = registers(expr.source, expr.indices)
            if new is not None and expr.source in self.runs_of:   # its run's first offset + its place in the run
                return new[mma._div(slot, VECTOR)] + tirx.Cast("int64", mma._mod(slot, VECTOR))
            return new[slot] if new is not None else expr

        def store(stmt):
            new = registers(stmt.buffer, stmt.indices)
            if new is not None and stmt.buffer in self.runs_of:   # only a run's first element is kept
                return tirx.IfThenElse(tirx.EQ(mma._mod(slot, VECTOR), 0),
                                       tirx.BufferStore(new, stmt.value, [mma._div(slot, VECTOR)]), None)
            return tirx.BufferStore(new, stmt.value, [nests.int_imm(slot) if isinstance(slot, int) else slot]) \
                if new is not None else stmt
        return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])

    def tensor_core_dot(self, d, lay) -> tirx.Stmt:
        """A dot nest on tensor cores (mma.py): its inits as any nest, then the product into the
        accumulator's registers, or, for an accumulator in shared memory, into registers loaded from
        it and stored back."""
        parts = [self.each_element(d.nest, nests.seq(d.inits))] if d.inits else []
        acc = self.local.get(d.c)
        with IRBuilder() as ib:
            with T.serial(0, 1):   # a frame to build the statements in, unwrapped below
                regs = acc if acc is not None else T.alloc_buffer((lay.rounds,), "float32", scope="local")
                if acc is None:
                    with T.unroll(0, lay.rounds) as it:
                        T.buffer_store(regs, d.c[lay.at(it, self.tx)], [it])
                mma.product(d, lay, self.tx, regs)
                if acc is None:
                    with T.unroll(0, lay.rounds) as it:
                        T.buffer_store(d.c, regs[it], list(lay.at(it, self.tx)))
        return nests.seq([*parts, ib.get().body])

    def vector_fill(self, nest: list, lay: Runs) -> tirx.Stmt:
        """An operand tile's fill from memory (a masked load), a run of 16 bytes at a time: one vector
        load and store where, at run time, the run's elements are all unmasked and their addresses
        consecutive and 16-byte aligned; else element by element (a view's strides, a ragged edge)."""
        run = tirx.Var("run", "int32")
        stores = []
        for v in range(lay.width):   # the run's elements: the nest's index and registers of each
            store, it = nest[-1].body, run * lay.width + v
            for loop, index in zip(nest, lay.at(it, self.tx)):
                store = nests.substitute(store, loop.loop_var, index)
            stores.append(self.own_elements(store, it, []))
        parts = [_masked_load(s.value) for s in stores]
        first = parts[0][1]
        fast = [p[0] for p in parts if p[0] is not None] + \
            [tirx.EQ(p[1].indices[0], first.indices[0] + v) for v, p in enumerate(parts) if v] + [_aligned(first)]
        ramp = tirx.Ramp(_multiple(first, lay.width), tirx.const(1, str(first.indices[0].ty.dtype)), lay.width)
        vector = tirx.BufferStore(stores[0].buffer, first.source[ramp],
                                  [*stores[0].indices[:-1], tirx.Ramp(stores[0].indices[-1], 1, lay.width)])
        body = tirx.IfThenElse(functools.reduce(tirx.And, fast), vector, nests.seq(stores))
        return tirx.For(run, nests.int_imm(0), nests.int_imm(lay.rounds // lay.width), tirx.ForKind.UNROLLED, body)

    def mirror(self, buf) -> tirx.Stmt:
        """A register buffer's elements stored to its shared copy, for a nest that reads them across
        the threads (each thread stores its own; TVM's thread sync then orders the nest's reads)."""
        lay, regs, it = self.mirrored[buf], self.local[buf], tirx.Var("it", "int32")
        store = tirx.BufferStore(buf, regs[it], list(lay.at(it, self.tx)))
        return tirx.For(it, nests.int_imm(0), nests.int_imm(lay.rounds), tirx.ForKind.UNROLLED, store)

    def all_reduce(self, body: tirx.Stmt) -> tirx.Stmt:
        """A reduction to a scalar by every thread: each reduces the elements tx, tx + threads, ... into
        its own (local) result, then TVM's thread all-reduce (warp shuffles, shared memory between
        warps) combines them, and every thread has the total."""
        loop = nests.reduction_loop(body)
        inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
        stores = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        extent = int(loop.extent.value)
        with IRBuilder() as ib:
            with T.serial(0, 1):   # a frame to build the statements in, unwrapped below
                with T.serial(0, -(-extent // self.threads)) as it:
                    r = it * self.threads + self.tx
                    with T.If(r < extent) if extent % self.threads else contextlib.nullcontext():
                        with T.Then() if extent % self.threads else contextlib.nullcontext():
                            T.Bind(r, var=loop.loop_var)
                            T.add_to_parent(self.own_elements(loop.body, it if extent > self.threads else 0,
                                                              [loop.loop_var]))
                results = [T.alloc_buffer((1,), str(store.value.ty.dtype), scope="local") for store in stores]
                with T.attr(loop.annotations[REDUCE], "reduce_scope",
                            tirx.reinterpret("handle", tirx.const(0, "uint64"))):
                    T.evaluate(tirx.call_intrin("handle", "tirx.tvm_thread_allreduce",
                                                tirx.const(len(stores), "uint32"), *[s.buffer[0] for s in stores],
                                                tirx.const(True, "bool"), *[b[0] for b in results], self.tx))
                for store, result in zip(stores, results):
                    T.buffer_store(store.buffer, result[0], [0])
        return nests.seq([*inits, ib.get().body])


def _own_element_buffers(body: tirx.Stmt, threads: int, mirrorable=frozenset()) -> tuple[dict, set]:
    """The program's buffers read and written only by block nests of their own shape, each at the
    nest's own index: every thread touches only its own elements of them, which can live in its
    registers (a local buffer of one element per round of the nest). Others stay shared. Of the
    `mirrorable` (tensor-core accumulators), those also read elsewhere in block nests are kept in
    registers all the same, and mirrored: copied to shared memory before such a nest (the second set)."""
    shared = {s.buffer: s for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
              and s.buffer.ty.storage_scope == "shared"}
    bad, elsewhere = set(), set()

    def visit(stmt, nest):
        if isinstance(stmt, tirx.For) and BLOCK in stmt.annotations:
            loops = nests.nest(stmt)
            reduction = nests.reduction_loop(loops[-1].body)
            if len(loops) == 1 and int(stmt.extent) == 1 and reduction is not None:
                # a reduction to a scalar: its threads read elements r = it * threads + tx, their own
                visit(reduction.body, ([reduction.loop_var], [reduction.extent]))
                return
            visit(loops[-1].body, ([loop.loop_var for loop in loops], [loop.extent for loop in loops]))
            return
        for child in nests.children(stmt):
            visit(child, nest)
        for n, (buf, indices) in enumerate(_accesses(stmt)):
            if buf in shared and not _at_own_index(buf, indices, nest):
                read = n > 0 or not isinstance(stmt, tirx.BufferStore)   # a store's own buffer comes first
                (elsewhere if read and nest is not None and buf in mirrorable else bad).add(buf)

    visit(body, None)
    out = {}
    for buf in shared:
        if buf not in bad:
            rounds = -(-functools.reduce(operator.mul, [int(d) for d in buf.ty.shape], 1) // threads)
            out[buf] = tirx.decl_buffer((rounds,), buf.ty.dtype, buf.name + "_own", scope="local")
    return out, elsewhere - bad


def _at_own_index(buf, indices, nest) -> bool:
    if nest is None:
        return False
    loop_vars, extents = nest
    return len(indices) == len(loop_vars) and all(i.same_as(v) for i, v in zip(indices, loop_vars)) and \
        all(int(a) == int(b) for a, b in zip(buf.ty.shape, extents))


def _all_accesses(stmt) -> list:
    """(buffer, indices) of the reads and writes in a statement and its children."""
    return [access for s in nests.walk(stmt) for access in _accesses(s)]


def _accesses(stmt) -> list:
    """(buffer, indices) of the reads and writes a statement makes itself (not its children's)."""
    exprs = []
    if isinstance(stmt, tirx.BufferStore):
        exprs = [stmt.value, *stmt.indices]
    elif isinstance(stmt, tirx.IfThenElse):
        exprs = [stmt.condition]
    elif isinstance(stmt, tirx.Bind):
        exprs = [stmt.value]
    elif isinstance(stmt, tirx.Evaluate):
        exprs = [stmt.value]
    elif isinstance(stmt, tirx.For):
        exprs = [stmt.min, stmt.extent]
    found = [(stmt.buffer, list(stmt.indices))] if isinstance(stmt, tirx.BufferStore) else []
    for expr in exprs:
        loads = []
        tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, loads.append))
        found += [(load.source, list(load.indices)) for load in loads]
    return found


def _dynamic_shared_if_large(body: tirx.Stmt) -> tirx.Stmt:
    """Shared buffers past the static limit (a matmul's large tiles) in dynamic shared memory, which
    TVM merges into one allocation, reusing the space of buffers no longer live: the largest ones, until
    the rest fits the static limit. The small ones stay static: TVM's sync planner sees the merged
    buffers as one, so a nest under `tx < total` (fewer elements than threads: a row sum's result)
    reading one dynamic buffer and writing another would need a barrier inside its condition."""
    shared = [s.buffer for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
              and s.buffer.ty.storage_scope == "shared"]

    def size(b):
        return functools.reduce(operator.mul, [int(d) for d in b.ty.shape], 1) * tvm.runtime.DataType(str(b.ty.dtype)).bits // 8
    static, moved = sum(size(b) for b in shared), 0
    dynamic = {}
    for b in sorted(shared, key=size, reverse=True):
        # a launch may pass 48 KB of shared memory in all unless it opts in, which TVM's launcher does
        # only for 48 KB of dynamic memory or more: so static <= 48 KB, and then either everything fits
        # 48 KB or the dynamic part is at least 48 KB (else CUDA_ERROR_INVALID_VALUE at the launch)
        if static <= STATIC_SHARED and (moved >= STATIC_SHARED or static + moved <= STATIC_SHARED):
            break
        dynamic[b] = tirx.decl_buffer(b.ty.shape, b.ty.dtype, b.name, scope="shared.dyn")
        static, moved = static - size(b), moved + size(b)
    return tvm_ffi.structural_map(body, [(tvm.ir.Var, lambda v: dynamic.get(v, v))]) if dynamic else body
