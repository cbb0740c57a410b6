"""The TensorIR backend end to end: code generation, where bt.parallel loops run (the schedule),
building, and calling the PrimFunc with the caller's own tensors.

Stages: "python", "ast", "tir" (the code generator's PrimFunc), "schedule" (bt.parallel loops made
into GPU kernels or CPU thread-pool loops), "source". A call writes into the parameters the function
assigns elements of and returns them: None without any, the tensor for one, a tuple (in parameter
order) for several.
"""
from __future__ import annotations

import functools
import operator

import numpy as np
import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import pipeline, schedules
from .codegen.tir import TIRCodeGen
from .errors import debug_enabled
from .jit import Kernel
from .types import TORCH_TO_NAME, ArgSpec, torch_to_vm, unwrap

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

def build(jitfn, specs: tuple[ArgSpec, ...], record, stages: dict) -> TIRKernel:
    """Compile one version of a backend="tir" function: code generation, schedule, tvm.compile."""
    named = dict(zip((p.name for p in jitfn.params), specs))
    codegen = TIRCodeGen(jitfn.parsed, named, jitfn.options)
    mod = codegen.build()
    record("tir", mod.script())
    target = jitfn.target()
    name = jitfn.parsed.name
    stage = "schedule"
    try:
        mod = tvm.IRModule({name: schedule(mod[name], target)})
        record("schedule", mod.script())
        stage = "build"
        executable = tvm.compile(mod, target=target)
    except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
        message = f"TVM failed to compile '{name}' (during {stage})"
        if debug_enabled():
            raise jitfn.parsed.source_map.error(jitfn.parsed.tree, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
        raise jitfn.parsed.source_map.error(
            jitfn.parsed.tree, message + "; set BABYTRITON_DEBUG=1 to see the cause") from None
    record("source", pipeline.generated_source(executable, target))
    return TIRKernel(name, jitfn.params, specs, target, executable, mod, stages, codegen.outputs)


class TIRKernel(Kernel):
    """One compiled version of a backend="tir" function: calls its PrimFunc directly (no Relax VM)."""

    def __init__(self, name, params, specs, target, executable, module, stages, outputs: list[str],
                 module_loader=None):
        super().__init__(name, params, specs, target, executable, module, stages, module_loader=module_loader)
        self.outputs = list(outputs)
        self._function = None

    def runner(self, args: tuple):
        # A compiled PrimFunc keeps no state between calls (unlike a Relax VM): threads share it.
        with self._vm_lock:
            if self._function is None:
                self._function = self.executable[self.name]
            function = self._function
        positions = [i for i, p in enumerate(self.params) if p.name in self.outputs]
        names = [p.name for p in self.params]
        tensors = [i for i, s in enumerate(self.specs) if s.kind == "tensor"]
        converters = []
        for position, spec in enumerate(self.specs):
            if spec.kind == "constexpr":
                continue
            if spec.kind == "scalar":
                converters.append((position, _SCALARS[spec.dtype]))
            else:
                converters.append((position, _output if position in positions else _input))
        converters = tuple(converters)
        outputs = tuple(positions)

        cpu = self.target.kind.name != "cuda"

        def run(args):
            if cpu:  # bt.parallel loops run on this thread's TVM pool
                schedules.sync_threads()
            _check_aliasing(args, outputs, tensors, names, self.name)
            write_back = []
            call_args = []
            for position, convert in converters:
                value, back = convert(args[position], names[position], self.name)
                call_args.append(value)
                if back is not None:
                    write_back.append(back)
            function(*call_args)
            for back in write_back:
                back()
            if not outputs:
                return None
            results = tuple(args[i] for i in outputs)
            return results[0] if len(results) == 1 else results
        return run


_SCALARS = {
    "int64": lambda value, name, fname: (int(value), None),
    "float64": lambda value, name, fname: (float(value), None),
    "bool": lambda value, name, fname: (bool(value), None),
}


def _to_tvm(data: torch.Tensor):
    if data.numel() == 0:  # any strides describe no memory, but the PrimFunc checks for compact ones
        device = tvm.cuda(data.device.index or 0) if data.is_cuda else tvm.cpu()
        return tvm.runtime.empty(tuple(data.shape), TORCH_TO_NAME[data.dtype], device)
    return torch_to_vm(data)


def _input(value, name, fname):
    data = unwrap(value)
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(np.ascontiguousarray(data)) if data.flags.writeable else torch.tensor(data)
    return _to_tvm(data), None


def _output(value, name, fname):
    """An argument the function writes: passed without a copy, or copied back after the call."""
    data = unwrap(value)
    if isinstance(data, np.ndarray):
        if not data.flags.writeable:
            raise ValueError(f"{fname}(): parameter '{name}' is written by the function, but the numpy array "
                             "passed for it is read-only")
        data = torch.from_numpy(data)
    if data.numel() == 0:
        return _to_tvm(data), None
    try:
        return tvm.runtime.from_dlpack(data), None
    except Exception:  # noqa: BLE001 - TVM takes only compact, aligned memory: work on a copy
        copy = data.clone(memory_format=torch.contiguous_format)
        return tvm.runtime.from_dlpack(copy), lambda: data.copy_(copy)


class _Layout:
    """Where a tensor's bytes are, in numpy's terms, so that numpy can compare layouts exactly
    (without reading the memory, which may be on a GPU)."""

    def __init__(self, data):
        if isinstance(data, np.ndarray):
            address, strides = data.__array_interface__["data"][0], data.strides
        else:
            address, strides = data.data_ptr(), tuple(s * data.element_size() for s in data.stride())
        itemsize = data.itemsize if isinstance(data, np.ndarray) else data.element_size()
        self.__array_interface__ = {"data": (address, False), "shape": tuple(data.shape) + (itemsize,),
                                    "strides": tuple(strides) + (1,), "typestr": "|u1", "version": 3}


def _span(data) -> tuple[int, int]:
    """The lowest and one-past-highest byte address a tensor's elements use."""
    if isinstance(data, np.ndarray):
        address, strides, itemsize = data.__array_interface__["data"][0], data.strides, data.itemsize
    else:
        itemsize = data.element_size()
        address, strides = data.data_ptr(), [s * itemsize for s in data.stride()]
    low = high = address
    for n, stride in zip(data.shape, strides):
        if n == 0:
            return address, address
        low, high = (low + (n - 1) * stride, high) if stride < 0 else (low, high + (n - 1) * stride)
    return low, high + itemsize


def _check_aliasing(args, outputs, tensors, names, fname):
    """A parameter the function writes must not share memory with another tensor argument
    (as torch's out= arguments)."""
    if not outputs:
        return
    spans = {i: _span(unwrap(args[i])) for i in tensors}
    for i in outputs:
        for j in tensors:
            if i != j and spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1] and np.shares_memory(
                    np.asarray(_Layout(unwrap(args[i]))), np.asarray(_Layout(unwrap(args[j])))):
                raise ValueError(f"{fname}(): parameter '{names[i]}' is written by the function and shares "
                                 f"memory with parameter '{names[j]}'; pass separate tensors")
