"""Values a row kernel keeps per thread, marked by the axis that is the thread index (THREAD_AXIS),
shrunk to one thread's slice after scheduling; here, below the strategies, because both the strategies
that mark them and the register check that sizes them use it."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from .analysis import find_all, retype, updated

THREAD_AXIS = "babytriton.thread_axis"


def own_thread_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """Shrink each buffer written by a block annotated THREAD_AXIS (RowKernel's exp in registers) to
    one thread's slice: that axis is the thread index in every access, so each thread's buffer needs
    extent 1 there (index 0). TVM's buffer compaction sees the passes' thread loops as different
    variables and kept the whole row per thread: 4096 halves of stack memory instead of 32 registers."""
    def shrink(func):
        blocks = find_all(func.body, s_tir.SBlock)
        axes = {}
        for block in blocks:
            if THREAD_AXIS in block.annotations:
                axes[block.writes[0].source] = int(block.annotations[THREAD_AXIS])
        if not axes:
            return func
        # (the buffer, its one-thread twin, the thread axis)
        slices = [(buf, tvm.ir.Var(buf.name, retype(buf.ty, shape=[1 if i == axis else d
                                                                      for i, d in enumerate(buf.ty.shape)])), axis)
                  for buf, axis in axes.items()]

        def axis_of(var):
            return next((axis for _, sliced, axis in slices if sliced.same_as(var)), None)

        def zero(indices, axis):
            return [tirx.const(0, i.ty.dtype if hasattr(i, "ty") else i.dtype) if n == axis else i
                    for n, i in enumerate(indices)]

        def load(node):
            axis = axis_of(node.source)
            return node if axis is None else tirx.BufferLoad(node.source, zero(node.indices, axis))

        def store(node):
            axis = axis_of(node.buffer)
            return node if axis is None else tirx.BufferStore(node.buffer, node.value, zero(node.indices, axis))

        def region(node):
            axis = axis_of(node.source)
            if axis is None:
                return node
            ranges = [tvm.ir.Range.from_min_extent(tirx.const(0, r.min.ty.dtype if hasattr(r.min, "ty")
                                                              else r.min.dtype), 1) if n == axis else r
                      for n, r in enumerate(node.region)]
            return tirx.BufferRegion(node.source, ranges)
        return tvm_ffi.structural_map(func, [(tvm.ir.Var, lambda var: next((sliced for buf, sliced, _ in slices
                                                                            if buf.same_as(var)), var)),
                                             (tvm.ir.TensorLoad, load), (tirx.BufferStore, store),
                                             (tvm.ir.TensorRegion, region)])
    return updated(mod, tirx.PrimFunc, shrink)
