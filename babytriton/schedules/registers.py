"""Every GPU thread's register arrays small: after a rule schedules a kernel (Guarded), the arrays in
scope "local" are sized as TVM's lowering will size them (CompactBufferAllocation: a buffer shrinks
to the region one thread touches). Where that region is no small constant, TVM keeps the whole buffer
a thread: p76's column sums over (2, 12, 2048) kept columns, each thread's four fused as
`(i + lane) // 2048, (i + lane) % 2048`, got 3,465,216 floats each, and the launch failed
(CUDA_ERROR_INVALID_VALUE). Such a buffer is flattened to one axis (the fused index then simplifies
back to `i + lane`: four floats); arrays still above LOCAL_LIMIT make the rule decline."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .analysis import find_all
from .thread_slices import THREAD_AXIS, own_thread_slices

# a thread's register arrays, all together: 256 float32 are already past the 255 registers of a
# thread (they spill to local memory); no rule means to keep more than a few dozen. Above this, the
# arrays are flattened where that makes them smaller
REGISTER_BYTES = 1024
# above this a kernel is declined: local memory is reserved at launch for every resident thread, and
# a launch needing too much fails. (OuterReduction's max.dim over (128, 150) tiles of float16 keeps
# 12,096 bytes a thread today: slow, but it runs)
LOCAL_LIMIT = 16 * 1024

# TVM's lowering (tvm.s_tir.pipeline) up to the compaction that sizes a thread's arrays
_UP_TO_COMPACTION = (s_tir.transform.CanonicalizeLoop, s_tir.transform.LowerCrossThreadReduction,
                     s_tir.transform.LowerInitBlock, s_tir.transform.PlanAndUpdateBufferAllocationLocation,
                     s_tir.transform.ConvertBlocksToOpaque, s_tir.transform.LiftThreadBinding,
                     s_tir.transform.ManifestSharedMemoryLocalStage, s_tir.transform.CompactBufferAllocation)


class TooManyRegisters(Exception):
    """A scheduled kernel whose threads would each keep a register array larger than REGISTER_BYTES
    (or of a symbolic size): no launch could run it."""


def register_arrays(func: tirx.PrimFunc) -> dict[str, int | None]:
    """Each "local" buffer of a scheduled `func` and its bytes per thread once lowered (None: a
    symbolic size), after the pipeline's own shrinking (`own_thread_slices`) and TVM's."""
    mod = own_thread_slices(tvm.IRModule({"main": func}))
    lowered = tvm.transform.Sequential([p() for p in _UP_TO_COMPACTION])(mod)["main"]
    # a thread's own arrays are those allocated under its launch; one allocated outside (a two-stage
    # reduction's partial results, read by the next launch) is not kept in any thread's registers
    launches = [loop for loop in find_all(lowered.body, tirx.For) if loop.kind == tirx.ForKind.THREAD_BINDING]
    inside = {id(b): b for loop in launches for b in find_all(loop.body, s_tir.SBlock)}
    return {buffer.name: _bytes(buffer) for block in inside.values() for buffer in block.alloc_buffers
            if buffer.scope() == "local"}


def _declared(func: tirx.PrimFunc) -> dict[str, int | None]:
    """Each "local" buffer that a block of `func` allocates, and its bytes as declared."""
    return {buffer.name: _bytes(buffer) for block in find_all(func.body, s_tir.SBlock)
            for buffer in block.alloc_buffers if buffer.scope() == "local"}


def _bytes(buffer) -> int | None:
    size = tvm.DataType(buffer.dtype).bits // 8 * max(tvm.DataType(buffer.dtype).lanes, 1)
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        size *= int(extent)
    return size


def small_registers(sch: s_tir.Schedule) -> s_tir.Schedule:
    """`sch` with each thread's register arrays within REGISTER_BYTES where flattening those too large
    to one axis gets them there (a thread's share of a fused index is contiguous in the flat buffer);
    raises TooManyRegisters where they stay above LOCAL_LIMIT."""
    if _fits(_declared(sch.mod["main"])):  # (compacting costs tens of ms a kernel: only where it may matter)
        return sch
    sizes = register_arrays(sch.mod["main"])
    if _fits(sizes):
        return sch
    flat = sch.copy()
    for name, size in sizes.items():
        if size is None or size > REGISTER_BYTES:
            try:
                _flatten(flat, name)
            except (s_tir.ScheduleError, tvm.error.TVMError):
                pass  # (it stays as it is, and too large)
    after = register_arrays(flat.mod["main"])
    if _total(after) < _total(sizes):
        sch, sizes = flat, after
    if _total(sizes) <= LOCAL_LIMIT:
        return sch
    name, size = max(sizes.items(), key=lambda item: _total({0: item[1]}))
    kind = "a symbolic size" if size is None else f"{size:,} bytes"
    raise TooManyRegisters(f"each thread would keep a register array `{name}` of {kind}")


def _total(sizes: dict) -> float:
    return float("inf") if None in sizes.values() else sum(sizes.values())


def _fits(sizes: dict) -> bool:
    return _total(sizes) <= REGISTER_BYTES


def _flatten(sch: s_tir.Schedule, name: str) -> None:
    """The buffer `name` (of the scheduled function) as one axis, through the first block writing it."""
    for realize in find_all(sch.mod["main"].body, s_tir.SBlockRealize):
        writes = [w.source for w in realize.block.writes]
        index = next((i for i, b in enumerate(writes) if b.name == name), None)
        if index is None:
            continue
        if THREAD_AXIS in realize.block.annotations:
            return  # (own_thread_slices shrinks it by its thread axis)
        shape = [extent for extent in writes[index].shape]
        if len(shape) > 1:
            sch.transform_layout(sch.get_sblock(realize.block.name_hint), ("write", index),
                                 lambda *axes: [_flat_index(axes, shape)])
        return


def _flat_index(axes, shape):
    index = axes[0]
    for axis, extent in zip(axes[1:], shape[1:]):
        index = index * extent + axis
    return index
