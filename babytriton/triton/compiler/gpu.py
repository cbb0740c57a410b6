"""The block program on a GPU (schedule.py): the grid's axes bound to blockIdx.x/y/z, a thread block
per program, the program's body run by num_warps * 32 threads. Each block nest's elements are spread
over them (element `it * threads + tx`); in a dot, each step of the reduced loop runs over all of a
thread's elements; a reduction to a scalar ends in TVM's thread all-reduce (warp shuffles); a value
each thread reads and writes only at its own elements lives in its registers, the rest in shared
memory (dynamic shared memory past 48 KB); a write to memory outside any nest (a scalar store) is
made by thread 0 alone."""
from __future__ import annotations

import contextlib
import functools
import operator

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import loops as nests
from .emit import BLOCK, PROGRAM, REDUCE

MAX_UNROLL = 128            # a nest of at most this many rounds per thread is unrolled
STATIC_SHARED = 48 * 1024   # the most static shared memory a CUDA kernel may have


def schedule(func: tirx.PrimFunc, num_warps: int) -> tirx.PrimFunc:
    """`func` for thread blocks of num_warps * 32 threads."""
    params = [p for p in func.params if hasattr(p.ty, "storage_scope")]   # the tensors' buffers
    threads = num_warps * 32
    body = _Gpu(threads, params, _own_element_buffers(func.body, threads)).stmt(func.body)
    return func.with_body(_dynamic_shared_if_large(body))


class _Gpu:
    """Rewrites a block program's statements for a thread block of `threads` threads."""

    def __init__(self, threads: int, params: list, local: dict):
        self.threads = threads
        self.params = params
        self.local = local     # shared buffer -> the registers holding each thread's own elements
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
            return tirx.AllocBuffer(self.local[s.buffer])
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
        nest = nests.nest(outer)
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
        """`body` for each of the thread's elements of the nest (the nest's loop vars bound to each)."""
        extents = [loop.extent.value for loop in nest]
        total = functools.reduce(operator.mul, extents, 1)
        rounds = -(-total // self.threads)
        it = tirx.Var("it", "int32")
        flat = it * self.threads + self.tx if rounds > 1 else self.tx
        binds, stride = [], total
        for loop, extent in zip(nest, extents):   # fresh vars: a nest's body may be placed twice (spread)
            stride //= extent
            var = tirx.Var(loop.loop_var.name, loop.loop_var.ty.dtype)
            body = nests.substitute(body, loop.loop_var, var)
            binds.append(tirx.Bind(var, tirx.floormod(tirx.floordiv(flat, stride), extent)))
        self.inside = True
        try:
            body = nests.seq([*binds, self.own_elements(self.stmt(body), it if rounds > 1 else 0)])
        finally:
            self.inside = False
        if total % self.threads:
            body = tirx.IfThenElse(flat < total, body, None)
        if rounds > 1:   # unrolled: a thread's own elements are then registers, not local memory
            kind = tirx.ForKind.UNROLLED if rounds <= MAX_UNROLL else tirx.ForKind.SERIAL
            body = tirx.For(it, nests.int_imm(0), nests.int_imm(rounds), kind, body)
        return body

    def own_elements(self, body: tirx.Stmt, slot) -> tirx.Stmt:
        """Reads and writes of a buffer each thread keeps its own elements of, as its register `slot`."""
        if not self.local:
            return body

        def load(expr):
            new = self.local.get(expr.source)
            return new[slot] if new is not None else expr

        def store(stmt):
            new = self.local.get(stmt.buffer)
            return tirx.BufferStore(new, stmt.value, [nests.int_imm(slot) if isinstance(slot, int) else slot]) \
                if new is not None else stmt
        return tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])

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
                            T.add_to_parent(self.own_elements(loop.body, it if extent > self.threads else 0))
                results = [T.alloc_buffer((1,), str(store.value.ty.dtype), scope="local") for store in stores]
                with T.attr(loop.annotations[REDUCE], "reduce_scope",
                            tirx.reinterpret("handle", tirx.const(0, "uint64"))):
                    T.evaluate(tirx.call_intrin("handle", "tirx.tvm_thread_allreduce",
                                                tirx.const(len(stores), "uint32"), *[s.buffer[0] for s in stores],
                                                tirx.const(True, "bool"), *[b[0] for b in results], self.tx))
                for store, result in zip(stores, results):
                    T.buffer_store(store.buffer, result[0], [0])
        return nests.seq([*inits, ib.get().body])


def _own_element_buffers(body: tirx.Stmt, threads: int) -> dict:
    """The program's buffers read and written only by block nests of their own shape, each at the
    nest's own index: every thread touches only its own elements of them, which can live in its
    registers (a local buffer of one element per round of the nest). Others stay shared."""
    shared = {s.buffer: s for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
              and s.buffer.ty.storage_scope == "shared"}
    bad = set()

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
        for buf, indices in _accesses(stmt):
            if buf in shared and not _at_own_index(buf, indices, nest):
                bad.add(buf)

    visit(body, None)
    out = {}
    for buf in shared:
        if buf not in bad:
            rounds = -(-functools.reduce(operator.mul, [int(d) for d in buf.ty.shape], 1) // threads)
            out[buf] = tirx.decl_buffer((rounds,), buf.ty.dtype, buf.name + "_own", scope="local")
    return out


def _at_own_index(buf, indices, nest) -> bool:
    if nest is None:
        return False
    loop_vars, extents = nest
    return len(indices) == len(loop_vars) and all(i.same_as(v) for i, v in zip(indices, loop_vars)) and \
        all(int(a) == int(b) for a, b in zip(buf.ty.shape, extents))


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
    TVM merges into one allocation, reusing the space of buffers no longer live."""
    shared = [s.buffer for s in nests.walk(body) if isinstance(s, tirx.AllocBuffer)
              and s.buffer.ty.storage_scope == "shared"]
    size = sum(functools.reduce(operator.mul, [int(d) for d in b.ty.shape], 1) * tvm.runtime.DataType(str(b.ty.dtype)).bits // 8
               for b in shared)
    if size <= STATIC_SHARED:
        return body
    dynamic = {b: tirx.decl_buffer(b.ty.shape, b.ty.dtype, b.name, scope="shared.dyn") for b in shared}
    return tvm_ffi.structural_map(body, [(tvm.ir.Var, lambda v: dynamic.get(v, v))])
