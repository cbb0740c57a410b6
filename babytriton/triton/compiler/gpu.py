"""The block program on a GPU (schedule.py): the grid's axes bound to blockIdx.x/y/z, a thread block
per program, the program's body run by num_warps * 32 threads. Each block nest's elements are spread
over them in chunks of `width` contiguous elements (chunk `it * threads + tx`), read and written as
16-byte vectors where a run-time check finds them aligned, as Triton's loads are; in a dot, each step of the reduced loop runs over all of a
thread's elements; a reduction to a scalar ends in TVM's thread all-reduce (warp shuffles); a value
each thread reads and writes only at its own elements lives in its registers, the rest in shared
memory (dynamic shared memory past 48 KB); a write to memory outside any nest (a scalar store) is
made by thread 0 alone. A float16/bfloat16 dot runs on tensor cores (mma.py) where its tile allows:
its accumulator's registers, and those of every nest that shares them, are then spread in the
instruction's fragment layout instead of `it * threads + tx`, and copied to shared memory only before
a nest that reads them across threads. The nests filling its operand tiles from memory copy runs of 16
bytes a thread (one vector load and store where a run is unmasked, contiguous and aligned at run time),
and a pointer block advanced by one step for all its elements is its expression plus one offset
(cpu.offsets): 64-bit offsets per element in registers spilled the tutorial matmul's K loop. What of
a run's start and checks does not change in the loop around the fill is computed before it. A K
loop of only such fills, the dot and what follows it is pipelined (pipelining.py): the fills of a
later step copied by cp.async into a slot of their tiles while the warps multiply this step's."""
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

from tvm.sym.pattern import detect_linear_equation

from . import loops as nests
from . import cpu, mma, pipelining
from .emit import BLOCK, PROGRAM, REDUCE
from .masks import fresh_binds, masked_vector, uses

MAX_UNROLL = 128            # a nest of at most this many rounds per thread is unrolled
VECTOR_BYTES = 16           # the widest access a thread makes: ld.global.v4.b32
VECTOR = 8                  # the most contiguous elements a thread takes of a nest: 16 bytes of float16
STATIC_SHARED = 48 * 1024   # the most static shared memory a CUDA kernel may have


def schedule(func: tirx.PrimFunc, num_warps: int, tensor_cores: bool = True, num_stages: int = 3) -> tirx.PrimFunc:
    """`func` for thread blocks of num_warps * 32 threads; `tensor_cores`: the target has mma.sync
    m16n8k16 and cp.async (sm_80 on), for the dots emit.py marked; `num_stages`: the operand tiles'
    slots of a pipelined dot loop (pipelining.py; 1: none)."""
    params = [p for p in func.params if hasattr(p.ty, "storage_scope")]   # the tensors' buffers
    threads = num_warps * 32
    # a pointer block advanced by one step for all its elements: its fill's expression plus one offset
    operands = {b for d, _ in _tensor_core_dots(func.body, threads).values() for b in (d.a, d.b)} \
        if tensor_cores else set()
    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, lambda seq: cpu.offsets(seq, operands, only=True))])
    if tensor_cores:
        body = _padded_operands(body, threads)
    dots = _tensor_core_dots(body, threads) if tensor_cores else {}
    # a thread's chunk is 16 bytes of the narrowest tensor: 4 of float32 (8 would leave a warp's
    # float4 loads 32 bytes apart, half of each sector per load: softmax 0.94x -> 0.73x of Triton)
    most = min(VECTOR, VECTOR_BYTES // min((_bytes(p.ty.dtype) for p in params), default=VECTOR_BYTES))
    local, mirrored = _own_element_buffers(body, threads, most, {d.c for d, _ in dots.values()})
    layouts, family = _mma_layouts(body, local, dots)
    gpu = _Gpu(threads, most, params, local, dots, layouts, {b: family[b] for b in mirrored},
               num_stages if tensor_cores else 1)
    # the shared memory of the program's other buffers, beside which a pipeline's slots must fit
    tiles = {b for d, _ in dots.values() for b in (d.a, d.b)}
    gpu.shared_bytes = sum(_size(s.buffer) for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
                           and s.buffer.ty.storage_scope == "shared" and s.buffer not in tiles
                           and (s.buffer not in local or s.buffer in mirrored))
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


def run_start(extents: list, width: int, run) -> list:
    """The index of the first element of run `run` of a block of `extents` cut into runs of `width`
    consecutive elements along its inner axis, runs numbered row-major (an int or a TIR expression)."""
    shape = [*extents[:-1], extents[-1] // width]
    index, stride = [], functools.reduce(operator.mul, shape, 1)
    for extent in shape:
        stride //= extent
        index.append(mma._mod(mma._div(run, stride), extent))
    return [*index[:-1], index[-1] * width]


def _masked_load(value):
    """(mask or None, the load, other) of an element of `tl.load` from a tensor, else None."""
    if isinstance(value, tvm.ir.Call) and value.op.name == "prim.if_then_else":
        mask, load, other = value.args
    else:
        mask, load, other = None, value, None
    if isinstance(load, tvm.ir.TensorLoad) and len(load.indices) == 1 and load.source.ty.storage_scope == "global":
        return mask, load, other
    return None


def _address(index, source):
    """The element at `index` of tensor `source` counted from the start of its memory (the index plus
    the tensor's element offset), in the index's type."""
    offset = source.ty.elem_offset
    return index + (tirx.Cast(str(index.ty.dtype), offset) if str(offset.ty.dtype) != str(index.ty.dtype) else offset)


def _multiple(index, source, width: int):
    """`index` into `source` spelled so that TVM's code generator sees that its address is a multiple
    of `width` elements, which it needs to make one vector access (true where used: under `_aligned`)."""
    return _address(index, source) // width * width - (_address(index, source) - index)


def _aligned(index, source, width: int):
    """Whether the address of `source`'s element `index` is a multiple of `width` elements (16 bytes):
    the tensor's pointer and the index both, as torch passes a view by its first element's address
    (a zero element offset), which may be anywhere, as may a row's start."""
    dtype = str(index.ty.dtype)
    start = tirx.EQ(tirx.bitwise_and(_address(index, source), tirx.const(width - 1, dtype)), tirx.const(0, dtype))
    return tirx.And(_pointer_aligned(source, width), start)


def _pointer_aligned(source, width: int):
    """Whether tensor `source`'s memory starts at a multiple of `width` of its elements (bytes), at run
    time: torch passes a view by its first element's address."""
    return tirx.EQ(tirx.bitwise_and(tirx.reinterpret("uint64", source.data),
                                    tirx.const(width * _bytes(source.ty.dtype) - 1, "uint64")), tirx.const(0, "uint64"))


def width(extents: list, threads: int, most: int = VECTOR) -> int:
    """The contiguous elements a thread takes of a nest of these extents at a time, one vector
    access: as many as divide the last axis, up to `most`, while every thread still has a whole
    vector. A function of the shape (and the kernel's `most`) alone: the nests that share a register
    buffer (all of its shape) must agree on which of its elements are whose."""
    total = functools.reduce(operator.mul, [int(e) for e in extents], 1)
    v = 1
    while v < most and int(extents[-1]) % (2 * v) == 0 and total >= threads * 2 * v:
        v *= 2
    return v


def _widest(body: tirx.Stmt) -> int:
    """The bytes of the widest value `body` computes (floating point) or reads and writes (the indices'
    int64 arithmetic aside: the vectors TVM makes of them are ramps, not values in registers)."""
    sizes = [1]
    tvm_ffi.structural_walk(body, (tvm.ir.Expr, lambda e: sizes.append(_bytes(e.ty.dtype))
                                   if "float" in str(getattr(e.ty, "dtype", "")) else None))
    sizes += [_bytes(buf.ty.dtype) for buf, _ in _all_accesses(body)]
    return max(sizes)


def _bytes(dtype) -> int:
    return max(1, tvm.runtime.DataType(str(dtype)).bits // 8)


def _widened_after(body: tirx.Stmt, lane) -> tirx.Stmt:
    """`body` with an int32 index widened to int64 after adding the lane (`int64(i + lane)`) widened
    before it (`int64(i) + int64(lane)`): TVM's vectoriser sees a ramp, a vector load, only in the
    second (the first it reads lane by lane). Equal wherever the index fits int32, as memory offsets do."""
    def widen(c):
        if "int" not in str(c.ty.dtype) or "int" not in str(c.value.ty.dtype) or not uses(c.value, lane):
            return c
        linear = detect_linear_equation(c.value, [lane])
        if not linear or not isinstance(linear[0], tirx.IntImm) or int(linear[0]) != 1:
            return c
        dtype = str(c.ty.dtype)
        return tirx.Cast(dtype, nests.substitute(c.value, lane, nests.int_imm(0, str(lane.ty.dtype)))) + \
            tirx.Cast(dtype, lane)
    return tvm_ffi.structural_map(body, [(tirx.Cast, widen)])


def _has_calls_to_keep(body: tirx.Stmt) -> bool:
    """Whether `body` makes calls for their effect (an atomic): those are kept one element at a time."""
    return any(isinstance(s, tirx.Evaluate) for s in nests.walk(body))


def _same(indices, loop_vars) -> bool:
    return len(indices) == len(loop_vars) and all(i.same_as(v) for i, v in zip(indices, loop_vars))


class _Gpu:
    """Rewrites a block program's statements for a thread block of `threads` threads."""

    def __init__(self, threads: int, most: int, params: list, local: dict, dots: dict, layouts: dict, mirrored: dict,
                 stages: int = 1):
        self.threads = threads
        self.stages = stages   # the operand tiles' slots in a pipelined dot loop (pipelining.py)
        self.shared_bytes = 0  # the shared memory the program's other buffers take
        self.most = most       # the most elements of a thread's chunk (width)
        self.params = params
        self.local = local     # shared buffer -> the registers holding each thread's own elements
        self.dots = dots       # tensor-core dots: nest -> (mma.Dot, mma.Layout)
        self.layouts = layouts   # the nests whose elements are spread in an mma.Layout: nest -> the layout
        self.mirrored = mirrored   # register buffers also copied to shared memory for nests reading across threads
        self.tx = tirx.Var("tx", "int32")
        self.inside = False    # inside a block nest: each thread writes its own elements
        # the serial loops around the statement being rewritten, innermost last: (the variables and
        # buffers that change inside it, the statements hoisted to run once before it)
        self.loops: list[tuple[set, list]] = []

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
        plan = pipelining.plan(loop, self.dots, self.fill_tile, self.stages, pipelining.MAX_SHARED - self.shared_bytes) \
            if self.stages > 1 else None
        if plan is not None:   # the slots, and the copies of the first stages - 1 steps, before the loop
            slots = {self.fill_tile(nests.nest(f)): None for f in plan.fills}
            for tile in list(slots):
                rows, cols = (int(x) for x in tile.ty.shape)
                slots[tile] = tirx.decl_buffer((plan.stages * rows, cols), tile.ty.dtype, tile.name + "_slots",
                                               scope=tile.ty.storage_scope)
            first = [self.copies(plan, loop, slots, s, before=True) for s in range(plan.stages - 1)]
            first = [tirx.IfThenElse(nests.int_imm(s) < loop.extent, c, None) for s, c in enumerate(first)]
            # (the slots' copies are not accesses to TVM's sync planner: a barrier before and after them, as
            # another buffer may share their memory)
            first = [tirx.AllocBuffer(b) for b in slots.values()] + [_SYNC] + [x for c in first for x in (c, _COMMIT)]
        frame = (pipelining.changing(loop), [])
        self.loops.append(frame)
        try:
            body = self.stmt(loop.body) if plan is None else self.pipelined(plan, loop, slots)
        finally:
            self.loops.pop()
        new = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, annotations=loop.annotations)
        if plan is not None:
            return nests.seq([*first, *frame[1], new, _wait(0), _SYNC])
        return nests.seq([*frame[1], new]) if frame[1] else new

    def fill_tile(self, nest: list):
        """The tensor-core operand tile that a block nest fills in runs of 16 bytes, else None."""
        return nest[-1].body.buffer if self.vector_width(nest) else None

    def copies(self, plan, loop: tirx.For, slots: dict, by: int, before: bool = False) -> tirx.Stmt:
        """The cp.async copies of the operand tiles of the step `by` steps after the current one
        (`before` the loop: after its first) into their slots."""
        step = nests.int_imm(by % plan.stages) if before else (loop.loop_var - loop.min + by) % plan.stages
        out = []
        for fill in plan.fills:
            nest = nests.nest(fill)
            width = self.vector_width(nest)
            moved = pipelining.ahead(fill, plan, loop, nests.int_imm(by, str(loop.loop_var.ty.dtype)))
            if before:
                moved = nests.substitute(moved, loop.loop_var, loop.min)
            tile = nest[-1].body.buffer
            rows = int(tile.ty.shape[0])
            moved = tvm_ffi.structural_map(moved, [(tirx.BufferStore, lambda st: tirx.BufferStore(
                slots[tile], st.value, [step * rows + st.indices[0], st.indices[1]]) if st.buffer.same_as(tile) else st)])
            out.append(self.vector_fill(nests.nest(moved), width, asynchronous=True))
        return nests.seq(out)

    def pipelined(self, plan, loop: tirx.For, slots: dict) -> tirx.Stmt:
        """The K loop's body pipelined (pipelining.py): wait for this step's copies (issued stages - 1
        steps ago) and for every thread to be done with the slot the next copies overwrite (the
        previous step's), issue those of the step stages - 1 ahead, multiply this step's slot."""
        stages = plan.stages
        body = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        binds = [s for s in body if isinstance(s, tirx.Bind)]
        temporaries = [self.stmt(s) for s in body if isinstance(s, tirx.AllocBuffer) and s.buffer not in slots]
        after = body[body.index(plan.dot) + 1:]
        d, lay = self.dots[plan.dot]
        slot = (loop.loop_var - loop.min) % stages
        # the copies run by run, spread among the dot's steps (all before them, every warp would
        # leave the tensor cores idle while it computes addresses and checks: the barrier aligns them)
        ahead = loop.loop_var + (stages - 1) < loop.min + loop.extent
        runs = [tirx.IfThenElse(ahead, fresh_binds(nests.substitute(copy.body, copy.loop_var, nests.int_imm(i))), None)
                for copy in _seq(self.copies(plan, loop, slots, stages - 1)) for i in range(int(copy.extent))]
        a, b = slots[d.a], slots[d.b]
        dot = self.tensor_core_dot(dataclasses.replace(d, a=a, b=b), lay, (slot * int(d.a.ty.shape[0]) * int(a.ty.shape[1]),
                                                                            slot * int(d.b.ty.shape[0]) * int(b.ty.shape[1])),
                                   between=runs)
        return nests.seq([*binds, *temporaries, _wait(stages - 2), _SYNC, dot, _COMMIT, *[self.stmt(s) for s in after]])

    def hoisted(self, name: str, dtype: str, value, it, rounds: int, guard):
        """`value` (an expression in the round `it` of a fill) as a register per round computed once
        before the innermost loop around the fill, when nothing it reads changes in that loop; else
        None. (nvcc left a tile's `% N` contiguity checks in a matmul's K loop: 1100 of its 1500
        instructions a warp a step at 128 x 256 x 64.)"""
        if not self.loops or not _invariant(value, self.loops[-1][0]):
            return None
        regs = tirx.decl_buffer((rounds,), dtype, name, scope="local")
        fresh = tirx.Var("it", "int32")
        store = tirx.BufferStore(regs, nests.substitute(value, it, fresh), [fresh])
        if guard is not None:
            store = tirx.IfThenElse(nests.substitute(guard, it, fresh), store, None)
        self.loops[-1][1].extend([tirx.AllocBuffer(regs), tirx.For(fresh, nests.int_imm(0), nests.int_imm(rounds),
                                                                     tirx.ForKind.UNROLLED, store)])
        return regs[it]

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
        run = self.vector_width(nest)   # an operand tile's fill: runs of 16 bytes (vector_fill)
        if run:
            return self.vector_fill(nest, run)
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
        """`body` for each of the thread's elements of the nest (the nest's loop vars bound to each): the
        chunks of `width` contiguous elements tx, tx + threads, ... (one vector access each, as Triton's
        16-byte loads), or the elements of its mma.Layout for a nest sharing registers with a tensor-core dot."""
        extents = [loop.extent.value for loop in nest]
        total = functools.reduce(operator.mul, extents, 1)
        lay = self.layouts.get(nest[0])
        v = 1 if lay is not None else width(extents, self.threads, self.most)
        chunks = total // v
        rounds = lay.rounds if lay is not None else -(-chunks // self.threads)
        it, lane = tirx.Var("it", "int32"), tirx.Var("lane", "int32")
        flat = it * self.threads + self.tx if rounds > 1 else self.tx   # the thread's chunk
        binds = []
        at = lay.at(it if rounds > 1 else 0, self.tx) if lay is not None else run_start(extents, v, flat)
        for axis, loop in enumerate(nest):   # fresh vars: a body may be placed twice
            var = tirx.Var(loop.loop_var.name, loop.loop_var.ty.dtype)
            # the lanes run along the last axis (width divides it): the others are the same for all lanes
            body = nests.substitute(body, loop.loop_var, var + lane if v > 1 and axis == len(nest) - 1 else var)
            binds.append(tirx.Bind(var, at[axis]))
        slot = (it * v + lane if rounds > 1 else lane) if v > 1 else (it if rounds > 1 else 0)
        self.inside = True
        try:
            own = [bind.var for bind in binds]
            inner = self.own_elements(self.stmt(body), slot, own)
        finally:
            self.inside = False
        body = nests.seq([*binds, self.vector(lane, v, inner) if v > 1 else inner])
        if lay is None and chunks % self.threads:
            body = tirx.IfThenElse(flat < chunks, body, None)
        if rounds > 1:   # unrolled: a thread's own elements are then registers, not local memory
            kind = tirx.ForKind.UNROLLED if rounds <= MAX_UNROLL else tirx.ForKind.SERIAL
            body = tirx.For(it, nests.int_imm(0), nests.int_imm(rounds), kind, body)
        return body

    def vector_width(self, nest: list) -> int | None:
        """The elements of 16 bytes, when the nest copies a tensor into a tensor-core operand's tile (a
        masked load at its own element; rows of a multiple of 16 bytes, mma.PAD) and touches no registers
        laid out per thread, so that its elements may go to any thread: a thread can then copy runs of
        them along the inner axis, a vector access each. Else None."""
        store, own = nest[-1].body, [loop.loop_var for loop in nest]
        operands = {b for d, _ in self.dots.values() for b in (d.a, d.b)}
        if not isinstance(store, tirx.BufferStore) or store.buffer not in operands or \
                store.buffer in self.local or nest[0] in self.layouts or not _same(store.indices, own):
            return None
        parts = _masked_load(store.value)
        if parts is None or str(parts[1].ty.dtype) != str(store.buffer.ty.dtype) or \
                any(b in self.local for b, _ in _all_accesses(nest[0])):
            return None
        run = VECTOR_BYTES * 8 // tvm.runtime.DataType(str(store.buffer.ty.dtype)).bits
        inner = int(nest[-1].extent)
        return run if run > 1 and inner % run == 0 and int(store.buffer.ty.shape[-1]) % run == 0 else None

    def vector_fill(self, nest: list, width: int, asynchronous: bool = False) -> tirx.Stmt:
        """A shared buffer's fill from a tensor in runs of `width` consecutive elements along the inner
        axis, run `it * threads + tx` a thread's: one 16-byte load where, at run time, the run's
        elements are unmasked and consecutive in memory from a 16-byte boundary, else element by
        element (a ragged edge, a view's strides, a misaligned start). Every run is loaded into
        registers before any is stored, so that the loads are in flight together; then each run is
        one 16-byte store to shared memory."""
        extents = [int(loop.extent) for loop in nest]
        shape = [*extents[:-1], extents[-1] // width]           # the grid of runs
        total = functools.reduce(operator.mul, shape, 1)
        rounds = -(-total // self.threads)
        dtype = str(nest[-1].body.buffer.ty.dtype)
        staged = tirx.decl_buffer((rounds * width,), dtype, nest[-1].body.buffer.name + "_staged", scope="local")
        it = tirx.Var("it", "int32")
        run = it * self.threads + self.tx
        index = run_start(extents, width, run)
        stores = []
        for v in range(width):
            store = nest[-1].body
            for loop, i in zip(nest, [*index[:-1], index[-1] + v]):
                store = nests.substitute(store, loop.loop_var, i)
            stores.append(store)
        parts = [_masked_load(s.value) for s in stores]
        source, first = parts[0][1].source, parts[0][1].indices[0]
        analyzer = tvm.sym.Analyzer()
        # computed outside any branch (bound first), so that nvcc moves what of it does not change
        # with the loop around the fill (a row's `% M`, the program's ids) out of that loop
        # (each element's distance from the run's start, which the loop's offset cancels from, checked by
        # bit operations: nvcc evaluates a chain of && lazily, computing its modulos again every step)
        dtype = str(first.ty.dtype)
        start = tirx.Var("start", dtype)
        steps = [analyzer.simplify(load.indices[0] - first) for _, load, _ in parts]
        off = [tirx.bitwise_xor(step, tirx.const(v, dtype)) for v, step in enumerate(steps)
               if v and not analyzer.can_prove_equal(step, v)]
        ok = ([tirx.EQ(functools.reduce(tirx.bitwise_or, off), tirx.const(0, dtype))] if off else []) + \
            [_aligned(start, source, width)]
        # what of the run's start and checks does not change in the loop around the fill (the rows'
        # `% M`, the program's ids; not the pointer's offset) is computed once, before that loop
        name, guard = stores[0].buffer.name, (run < total if total % self.threads else None)
        if len(ok) > 1:
            contiguous = self.hoisted(name + "_contiguous", "bool", ok[0], it, rounds, guard)
            ok[0] = ok[0] if contiguous is None else contiguous
        terms = _terms(first)
        fixed = [t for t in terms if self.loops and _invariant(t, self.loops[-1][0])]
        if fixed and len(fixed) < len(terms):
            base = self.hoisted(name + "_base", dtype, functools.reduce(tirx.Add, fixed), it, rounds, guard)
            first = functools.reduce(tirx.Add, [base, *[t for t in terms if not any(t.same_as(f) for f in fixed)]])
        whole = tirx.Var("whole", "bool")
        masks = [mask for mask, _, _ in parts if mask is not None]
        if asynchronous:   # a whole run by cp.async, the rest element by element, both into shared memory
            copy = tirx.Evaluate(T.ptx["cp.async.cg.shared.global"](
                _address_of(stores[0].buffer[tuple(stores[0].indices)]), _address_of(source[start]), VECTOR_BYTES))
            # the rest stored by st.shared, which TVM's sync planner does not take for accesses either: the
            # pipeline's own barrier orders both (else the planner adds a second one a step, before the dot)
            rest = nests.seq([tirx.Evaluate(T.ptx["st.shared.b16"](_shared_address(st.buffer[tuple(st.indices)]), st.value))
                              for st in stores])
            body = nests.seq([tirx.Bind(start, first), tirx.Bind(whole, functools.reduce(tirx.And, ok)),
                              tirx.IfThenElse(functools.reduce(tirx.And, [*masks, whole]), copy, rest)])
            if total % self.threads:
                body = tirx.IfThenElse(run < total, body, None)
            return tirx.For(it, nests.int_imm(0), nests.int_imm(rounds), tirx.ForKind.UNROLLED, body)
        ramp = tirx.Ramp(_multiple(start, source, width), tirx.const(1, str(first.ty.dtype)), width)
        mine = tirx.Ramp(it * width, 1, width)
        load = nests.seq([tirx.Bind(start, first), tirx.Bind(whole, functools.reduce(tirx.And, ok)), tirx.IfThenElse(
            functools.reduce(tirx.And, [*masks, whole]), tirx.BufferStore(staged, source[ramp], [mine]),
            nests.seq([tirx.BufferStore(staged, s.value, [it * width + v]) for v, s in enumerate(stores)]))])
        store = tirx.BufferStore(stores[0].buffer, staged[mine],
                                 [*stores[0].indices[:-1], tirx.Ramp(stores[0].indices[-1], 1, width)])
        steps = []
        for body in (load, store):
            if total % self.threads:
                body = tirx.IfThenElse(run < total, body, None)
            steps.append(tirx.For(it, nests.int_imm(0), nests.int_imm(rounds), tirx.ForKind.UNROLLED, body))
        return nests.seq([tirx.AllocBuffer(staged), *steps])

    def vector(self, lane, v: int, body: tirx.Stmt) -> tirx.Stmt:
        """`body` for lane in range(v) as vectors of up to 16 bytes (CUDA's widest; masks.masked_vector:
        whole vectors away from a block's ragged edge) where every access moving with the lane is
        contiguous and, at run time, starts aligned for its vector (a tensor's pointer and row stride are
        known only then); lane by lane elsewhere."""
        lane_by_lane = tirx.For(lane, nests.int_imm(0), nests.int_imm(v), tirx.ForKind.UNROLLED, fresh_binds(body))
        w = min(v, VECTOR_BYTES // _widest(body))
        # shared memory stays lane by lane: the vectors' run-time branches would put the thread
        # barriers its reads need (TVM's sync planner) under a condition
        shared = any(str(buf.ty.storage_scope).startswith("shared") for buf, _ in _all_accesses(body))
        aligned = None if _has_calls_to_keep(body) or shared or w == 1 else self.aligned(body, lane, w)
        if aligned is None:
            return lane_by_lane
        checks, body = aligned
        part, at = tirx.Var("part", "int32"), tirx.Var("lane", "int32")
        inner = _widened_after(nests.substitute(body, lane, part * w + at), at)
        vectors = masked_vector(at, w, inner, selects=True)
        if w < v:
            vectors = tirx.For(part, nests.int_imm(0), nests.int_imm(v // w), tirx.ForKind.UNROLLED, vectors)
        else:
            vectors = nests.substitute(vectors, part, nests.int_imm(0))
        return tirx.IfThenElse(functools.reduce(tirx.And, checks), vectors, lane_by_lane) if checks else vectors

    def aligned(self, body: tirx.Stmt, lane, w: int):
        """(the run-time conditions under which every access of `body` moving with the lane starts a
        whole vector of w elements, `body` with those accesses' indices written so that TVM sees them
        aligned: `floordiv(start, w) * w + lane`), or None where one does not move by 1 per lane along
        its last axis (a gather, a column): TVM has no 8-lane gathers to fall back on."""
        checks, failed = [], []

        def index(buf, indices):
            if not any(uses(i, lane) for i in indices):
                return indices
            last = indices[-1]
            stripped = tvm_ffi.structural_map(last, [(tirx.Cast, lambda c: c.value if "int" in str(c.ty.dtype)
                                                      and "int" in str(c.value.ty.dtype) else c)])
            linear = detect_linear_equation(stripped, [lane])
            if any(uses(i, lane) for i in indices[:-1]) or not linear or not isinstance(linear[0], tirx.IntImm) \
                    or int(linear[0]) != 1 or (len(indices) > 1 and int(buf.ty.shape[-1]) % w):
                failed.append(buf)
                return indices
            start = nests.substitute(last, lane, nests.int_imm(0, str(lane.ty.dtype)))
            checks.append(tirx.EQ(tirx.floormod(start, w), tirx.const(0, str(start.ty.dtype))))
            if any(buf.same_as(p) for p in self.params):   # and the tensor's memory itself
                checks.append(_pointer_aligned(buf, w))
            return [*indices[:-1], tirx.floordiv(start, w) * w + tirx.Cast(str(start.ty.dtype), lane)]

        def load(e):
            new = index(e.source, list(e.indices))
            return e if new is not None and all(a.same_as(b) for a, b in zip(new, e.indices)) else e.source[tuple(new)]

        def store(st):
            new = index(st.buffer, list(st.indices))
            return st if all(a.same_as(b) for a, b in zip(new, st.indices)) else tirx.BufferStore(st.buffer, st.value, new)
        body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
        if failed:
            return None
        analyzer = tvm.sym.Analyzer()
        checks = [analyzer.simplify(c) for c in checks]
        kept = []
        for c in checks:   # the same pointer or start checked once; those always true dropped
            if not (isinstance(c, tirx.IntImm) and int(c) == 1) and not any(tvm_ffi.structural_equal(c, k) for k in kept):
                kept.append(c)
        return kept, body

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
            return new[slot] if new is not None else expr

        def store(stmt):
            new = registers(stmt.buffer, stmt.indices)
            return tirx.BufferStore(new, stmt.value, [nests.int_imm(slot) if isinstance(slot, int) else slot]) \
                if new is not None else stmt
        return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])

    def tensor_core_dot(self, d, lay, at=(0, 0), between=()) -> tirx.Stmt:
        """A dot nest on tensor cores (mma.py): its inits as any nest, then the product into the
        accumulator's registers, or, for an accumulator in shared memory, into registers loaded from
        it and stored back. `at`: where the operand tiles start in their buffers (a pipeline's slots);
        `between`: statements spread among the product's steps (mma.product)."""
        parts = [self.each_element(d.nest, nests.seq(d.inits))] if d.inits else []
        acc = self.local.get(d.c)
        with IRBuilder() as ib:
            with T.serial(0, 1):   # a frame to build the statements in, unwrapped below
                regs = acc if acc is not None else T.alloc_buffer((lay.rounds,), "float32", scope="local")
                if acc is None:
                    with T.unroll(0, lay.rounds) as it:
                        T.buffer_store(regs, d.c[lay.at(it, self.tx)], [it])
                mma.product(d, lay, self.tx, regs, *at, between=between)
                if acc is None:
                    with T.unroll(0, lay.rounds) as it:
                        T.buffer_store(d.c, regs[it], list(lay.at(it, self.tx)))
        return nests.seq([*parts, ib.get().body])

    def mirror(self, buf) -> tirx.Stmt:
        """A register buffer's elements stored to its shared copy, for a nest that reads them across
        the threads (each thread stores its own; TVM's thread sync then orders the nest's reads)."""
        lay, regs, it = self.mirrored[buf], self.local[buf], tirx.Var("it", "int32")
        store = tirx.BufferStore(buf, regs[it], list(lay.at(it, self.tx)))
        return tirx.For(it, nests.int_imm(0), nests.int_imm(lay.rounds), tirx.ForKind.UNROLLED, store)

    def all_reduce(self, body: tirx.Stmt) -> tirx.Stmt:
        """A reduction to a scalar by every thread: each reduces its own elements (the chunks of `width`
        elements tx, tx + threads, ..., as each_element spreads them) into its own (local) result, then
        TVM's thread all-reduce (warp shuffles, shared memory between warps) combines them, and every
        thread has the total."""
        loop = nests.reduction_loop(body)
        inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
        stores = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        extent = int(loop.extent.value)
        v = width([extent], self.threads, self.most)
        chunks = extent // v
        with IRBuilder() as ib:
            with T.serial(0, 1):   # a frame to build the statements in, unwrapped below
                with T.serial(0, -(-chunks // self.threads)) as it:
                    c = it * self.threads + self.tx
                    with T.If(c < chunks) if chunks % self.threads else contextlib.nullcontext():
                        with T.Then() if chunks % self.threads else contextlib.nullcontext():
                            with T.unroll(0, v) if v > 1 else contextlib.nullcontext(0) as lane:
                                T.Bind(c * v + lane, var=loop.loop_var)
                                at = it if chunks > self.threads else 0
                                T.add_to_parent(self.own_elements(loop.body, at * v + lane if v > 1 else at,
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


def _own_element_buffers(body: tirx.Stmt, threads: int, most: int, mirrorable=frozenset()) -> tuple[dict, set]:
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
            shape = [int(d) for d in buf.ty.shape]
            v = width(shape, threads, most)   # each_element's chunks of v elements: whole chunks per thread
            rounds = -(-functools.reduce(operator.mul, shape, 1) // (threads * v)) * v
            out[buf] = tirx.decl_buffer((rounds,), buf.ty.dtype, buf.name + "_own", scope="local")
    return out, elsewhere - bad


def _at_own_index(buf, indices, nest) -> bool:
    if nest is None:
        return False
    loop_vars, extents = nest
    return len(indices) == len(loop_vars) and all(i.same_as(v) for i, v in zip(indices, loop_vars)) and \
        all(int(a) == int(b) for a, b in zip(buf.ty.shape, extents))


_COMMIT = tirx.Evaluate(T.ptx["cp.async.commit_group"]())
_SYNC = tirx.Evaluate(tirx.call_intrin("handle", "tirx.tvm_storage_sync", "shared"))


def _wait(pending: int) -> tirx.Stmt:
    """Wait until at most `pending` of the thread's groups of cp.async copies are in flight."""
    return tirx.Evaluate(T.ptx["cp.async.wait_group"](pending))


def _seq(stmt) -> list:
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _address_of(load):
    return tirx.call_intrin("handle", "tirx.address_of", load)


def _shared_address(load):
    return T.cuda.cvta_generic_to_shared(_address_of(load))


def _invariant(expr, changing: set) -> bool:
    """Whether `expr` has the same value in every step of a loop in which `changing` change, and may be
    computed before it: it uses none of those variables and reads no memory (a read the loop guards,
    or makes in no step, could fault before it)."""
    found, loads = [], []
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, loads.append), (tvm.ir.Var, found.append)])
    return not loads and not any(x in changing for x in found)


def _terms(expr) -> list:
    """The terms of a sum (`a + b + c` -> [a, b, c])."""
    return [*_terms(expr.a), *_terms(expr.b)] if isinstance(expr, tirx.Add) else [expr]


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


def _size(b) -> int:
    """A buffer's bytes."""
    return functools.reduce(operator.mul, [int(d) for d in b.ty.shape], 1) * tvm.runtime.DataType(str(b.ty.dtype)).bits // 8


def _dynamic_shared_if_large(body: tirx.Stmt) -> tirx.Stmt:
    """Shared buffers past the static limit (a matmul's large tiles) in dynamic shared memory, which
    TVM merges into one allocation, reusing the space of buffers no longer live: the largest ones, until
    the rest fits the static limit. The small ones stay static: TVM's sync planner sees the merged
    buffers as one, so a nest under `tx < total` (fewer elements than threads: a row sum's result)
    reading one dynamic buffer and writing another would need a barrier inside its condition."""
    shared = [s.buffer for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
              and s.buffer.ty.storage_scope == "shared"]
    size = _size
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
