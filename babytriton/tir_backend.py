"""The TensorIR backend: code generation, where bt.parallel loops run (the schedule), and building;
the build is a `runtime.Compiled` as the Relax backend's, and runtime.Kernel calls the PrimFunc with
the caller's own tensors.

Stages: "python", "ast", "tir" (the code generator's PrimFunc), "schedule" (bt.parallel loops made
into GPU kernels or CPU thread-pool loops), "source". A call writes into the parameters the function
assigns elements of and returns them: None without any, the tensor for one, a tuple (in parameter
order) for several.
"""
from __future__ import annotations

import functools
import operator

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import pipeline
from .arguments import ArgSpec
from .codegen.tir import TIRCodeGen
from .errors import debug_enabled
from .frontend import FunctionInfo
from .runtime import Compiled

THREADS_PER_BLOCK = 256


# --------------------------------------------------------------------------------------------------
# The schedule: where the bt.parallel loops run
# --------------------------------------------------------------------------------------------------

def schedule(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc:
    """Map the function onto the target. A nest of bt.parallel loops at the top of the body becomes
    one loop over all its iterations: a CPU thread-pool loop, or a GPU kernel with one thread per
    iteration. On a GPU, the other top-level statements run, in order, as one-thread kernels, and the
    top-level locals (shared by those kernels) live in GPU memory allocated by the host."""
    gpu = target.kind.name == "cuda"
    analyzer = tvm.sym.Analyzer()
    sizes = {dim for param in func.params if isinstance(param.ty, tirx.BufferType)
             for dim in param.ty.shape if isinstance(dim, tirx.Var)}
    for size in sizes:  # tensor sizes are never negative: lets max(n, 0) simplify to n
        analyzer.bind(size, tvm.ir.Range(tirx.IntImm(size.ty.dtype, 0), tirx.IntImm(size.ty.dtype, 1 << 62)))
    statements = list(func.body.seq) if isinstance(func.body, tirx.SeqStmt) else [func.body]
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
    return func.with_body(tirx.SeqStmt(stmts) if len(stmts) != 1 else stmts[0])


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


# --------------------------------------------------------------------------------------------------
# Building and calling
# --------------------------------------------------------------------------------------------------

def build(info: FunctionInfo, specs: tuple[ArgSpec, ...], record, stages: dict) -> Compiled:
    """Compile one version of a backend="tir" function: code generation, schedule, tvm.compile."""
    named = dict(zip((p.name for p in info.params), specs))
    codegen = TIRCodeGen(info.parsed, named, info.codegen_options)
    mod = codegen.build()
    record("tir", mod.script())
    target = info.target
    name = info.parsed.name
    stage = "schedule"
    try:
        mod = tvm.IRModule({name: schedule(mod[name], target)})
        record("schedule", mod.script())
        stage = "build"
        executable = tvm.compile(mod, target=target)
    except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
        message = f"TVM failed to compile '{name}' (during {stage})"
        if debug_enabled():
            raise info.parsed.source_map.error(info.parsed.tree, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
        raise info.parsed.source_map.error(
            info.parsed.tree, message + "; set BABYTRITON_DEBUG=1 to see the cause") from None
    record("source", pipeline.generated_source(executable, target))
    return Compiled("tir", executable, mod, stages, outputs=tuple(codegen.outputs))
