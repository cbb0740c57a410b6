"""Parallel loops as GPU kernels: backend="tir" functions (`loops_to_kernels`), and kernels no GPU rule
scheduled (`launch_unscheduled`)."""
from __future__ import annotations

import functools
import operator

import tvm
from tvm import s_tir, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .analysis import find_all, sizes_analyzer, updated
from .wrappers import RULE_ATTR


THREADS_PER_BLOCK = 256   # a parallel loop's GPU kernel: one thread per iteration, this many per block


def loops_to_kernels(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc:
    """Map a function of plain loops onto the target (a backend="tir" function's schedule). A nest of
    parallel loops at the top of the body becomes one loop over all its iterations: a CPU thread-pool
    loop, or a GPU kernel with one thread per iteration. On a GPU, the other top-level statements run,
    in order, as one-thread kernels, and the top-level locals (shared by those kernels) live in GPU
    memory allocated by the host."""
    return func.with_body(_statements_to_kernels(func, func.body, target.kind.name == "cuda"))


def launch_unscheduled(mod: tvm.IRModule) -> tvm.IRModule:
    """On a GPU, a kernel that no rule scheduled and that binds no thread (TVM's generic scatter: an
    opaque block of `parallel` loops) would be compiled as host code reading GPU memory: its
    statements become GPU kernels as a backend="tir" function's are (its parallel loops one thread per
    iteration, the rest on one thread)."""
    def launch(func):
        if any(loop.kind == tirx.ForKind.THREAD_BINDING for loop in find_all(func.body, tirx.For)) or \
                not find_all(func.body, tirx.For) and not find_all(func.body, tirx.BufferStore):
            return func
        return func.with_body(_inside_blocks(func, func.body)).with_attr(RULE_ATTR, "loops_to_kernels")
    return updated(mod, tirx.PrimFunc, launch)


def _inside_blocks(func, stmt):
    """The statements under the blocks and attributes that wrap them, mapped onto GPU kernels."""
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate,
                                   _with_block_body(block, _inside_blocks(func, block.body)))
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key != "thread_extent":
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _inside_blocks(func, stmt.body))
    return _statements_to_kernels(func, stmt, True)


def _with_block_body(block, body):
    return s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       block.alloc_buffers, block.match_buffers, block.annotations)


def _statements_to_kernels(func, body, gpu: bool):
    analyzer = sizes_analyzer(func)  # tensor sizes are never negative: lets max(n, 0) simplify to n
    statements = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    host, body, serial = [], [], []

    def flush():
        if serial:
            body.append(_kernel(serial, None, analyzer) if gpu else tirx.SeqStmt(list(serial)) if len(serial) > 1
                        else serial[0])
            serial.clear()

    for stmt in statements:
        if gpu and isinstance(stmt, tirx.AllocBuffer):
            host.append(stmt)
        elif isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL:
            flush()
            nest = _parallel_nest(stmt)
            if gpu:
                body.append(_kernel([nest[-1].body], nest, analyzer))
            elif len(nest) > 1:
                body.append(_fused_loop(nest, analyzer))
            else:
                body.append(stmt)
        else:
            serial.append(stmt)
    flush()
    stmts = host + [s for s in body if s is not None]
    return tirx.SeqStmt(stmts) if len(stmts) != 1 else stmts[0]


def _parallel_nest(loop: tirx.For) -> list[tirx.For]:
    nest = [loop]
    while isinstance(nest[-1].body, tirx.For) and nest[-1].body.kind == tirx.ForKind.PARALLEL:
        nest.append(nest[-1].body)
    return nest


def _extents(nest, analyzer):
    extents = [analyzer.simplify(tirx.max(loop.extent, tirx.IntImm(loop.extent.ty.dtype, 0))) for loop in nest]
    total = analyzer.simplify(functools.reduce(operator.mul, extents))
    return extents, total


def _bind_nest(nest, extents, flat):
    """Define each loop variable of the nest from the flat iteration number (row-major order).
    Only used where flat >= 0 and every extent >= 1, so truncating division is floor division."""
    values = [None] * len(nest)
    stride = tirx.IntImm("int64", 1)
    for position in reversed(range(len(nest))):
        index = flat if position == len(nest) - 1 else tirx.truncdiv(flat, stride)
        if position > 0:
            index = tirx.truncmod(index, extents[position])
        values[position] = nest[position].min + index
        stride = stride * extents[position]
    for loop, value in zip(nest, values):
        T.Bind(value, var=loop.loop_var)


def _fused_loop(nest, analyzer):
    extents, total = _extents(nest, analyzer)
    with IRBuilder() as ib:
        with T.parallel(tirx.IntImm("int64", 0), total) as flat:
            IRBuilder.name("_".join(loop.loop_var.name for loop in nest), flat)
            _bind_nest(nest, extents, flat)
            T.add_to_parent(nest[-1].body)
    return ib.get()


def _kernel(stmts, nest, analyzer):
    """A GPU kernel running `stmts`: once (nest None), or once per iteration of a parallel nest."""
    if nest is None:
        blocks = threads = tirx.IntImm("int32", 1)
        extents = total = None
    else:
        extents, total = _extents(nest, analyzer)
        if isinstance(total, tirx.IntImm) and total.value == 0:
            return None
        per_block = min(THREADS_PER_BLOCK, total.value) if isinstance(total, tirx.IntImm) else THREADS_PER_BLOCK
        threads = tirx.IntImm("int32", per_block)
        blocks = tirx.Cast("int32", tirx.floordiv(total + (per_block - 1), per_block)) \
            if not isinstance(total, tirx.IntImm) else tirx.IntImm("int32", -(-total.value // per_block))
    with IRBuilder() as ib:
        with T.thread_binding(blocks, thread="blockIdx.x") as bx:
            with T.thread_binding(threads, thread="threadIdx.x") as tx:
                IRBuilder.name("bx", bx)
                IRBuilder.name("tx", tx)
                if nest is None:
                    for stmt in stmts:
                        T.add_to_parent(stmt)
                else:
                    flat = T.Bind(tirx.Cast("int64", bx) * tirx.IntImm("int64", threads.value)
                                  + tirx.Cast("int64", tx))
                    IRBuilder.name("_".join(loop.loop_var.name for loop in nest), flat)
                    with T.If(flat < total):
                        with T.Then():
                            _bind_nest(nest, extents, flat)
                            for stmt in stmts:
                                T.add_to_parent(stmt)
    return ib.get()
