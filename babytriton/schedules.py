"""How fused TIR kernels get a schedule: Dlight's rules plus babytriton's own, the tutorial's
Fallback-only mode, or MetaSchedule tuning with an on-disk database that later runs reuse.

On a GPU, "dlight" also hands matrix products and attention to torch (offload.py). On a CPU,
babytriton's own rules inline, parallelise (on torch's OpenMP threads: threads.py) and vectorise
every kernel, matrix products included (a register-tiled schedule that keeps their epilogues fused).
After scheduling, `serial_kernels` finds the kernels that would still run a large amount of work on
one thread (or one GPU block): the pipeline warns about them (SerialKernelWarning).
"""
from __future__ import annotations

import functools
import hashlib
import operator
import importlib.util
import logging
import os
import re
import sys
import threading
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T
from tvm.sym.pattern import detect_linear_equation

from . import legalize
from .errors import debug_enabled
from .types import is_float_dtype

SCHEDULES = ("dlight", "fallback", "meta_schedule")
TUNE_EXTRAS = ("psutil", "cloudpickle", "xgboost")
BUILD_TIMEOUT_S = 300


# --------------------------------------------------------------------------------------------------
# babytriton's own Dlight rules
# --------------------------------------------------------------------------------------------------

def _normalized(rule, func, target):
    """A schedule of `func` and its blocks' infos (every block as [spatial..., reduce...] loops), or
    (None, None) when `func` is no PrimFunc for the rule's target or does not normalise."""
    if not isinstance(func, tirx.PrimFunc) or not rule.is_target_available(target):
        return None, None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    return (sch, infos) if infos else (None, None)


def _one_loop(sch, blocks):
    """The loops of injective blocks that each write a result of the kernel fused into one loop over
    all of them (a kernel with several outputs: AdamW's p, m and v), or None when they don't fit one
    loop: different sizes, a block reading another's result at some index other than its own (a
    later element may not exist yet), or an intermediate buffer. One block: its loops fused."""
    if len(blocks) == 1:
        loops = sch.get_loops(blocks[0])
        return _fuse(sch, loops) if loops else None
    nests = []
    for block in blocks:
        loops = sch.get_loops(block)
        realize = sch.get(loops[-1]).body if loops else None
        if not isinstance(realize, s_tir.SBlockRealize) or len(realize.iter_values) != len(loops) or not all(
                value.same_as(sch.get(loop).loop_var) for value, loop in zip(realize.iter_values, loops)):
            return None  # not one iteration per loop step
        nests.append((loops, realize.block))
    extents = [[sch.get(loop).extent for loop in loops] for loops, _ in nests]
    if any(len(e) != len(extents[0]) or not all(tvm_ffi.structural_equal(a, b) for a, b in zip(e, extents[0]))
           for e in extents):
        return None
    written = [region.source for _, block in nests for region in block.writes]
    params = sch.mod["main"].params
    if not all(any(w.same_as(p) for p in params) for w in written):
        return None  # an intermediate kept as a buffer (too deep to inline): its nest stays apart
    for _, block in nests:
        if not all(_at_own_index(region, block) for region in block.writes) or not all(
                _at_own_index(region, block) for region in block.reads
                if any(region.source.same_as(w) for w in written)):
            return None
    fused = [_fuse(sch, loops) for loops, _ in nests]
    try:
        return sch.merge(*fused)
    except Exception:  # noqa: BLE001 - not mergeable (TVM raises several types): each loop on its own
        return None


def _at_own_index(region, block) -> bool:
    """Whether a buffer region is the one element at the block's iteration indices, in order."""
    ivs = block.iter_vars
    return len(region.region) == len(ivs) and all(
        _is_int(r.extent, 1) and r.min.same_as(iv.var) for r, iv in zip(region.region, ivs))


def _single_block(rule: GPUScheduleRule, func, target):
    """A schedule of `func` and its one block after inlining, or (None, None) when the rule can't apply."""
    sch, infos = _normalized(rule, func, target)
    if sch is None:
        return None, None
    infos = _inline(sch, infos, GPU_CALL_DEPTH)
    return (sch, infos[0]) if len(infos) == 1 else (None, None)


class Elementwise(GPUScheduleRule):
    """Injective kernels with a static size: each thread moves 16 bytes of every buffer with one
    vector load/store (float4 for float32). Dlight's Fallback moves one scalar per thread, which leaves
    a third of the memory bandwidth unused on large element-wise chains. A kernel with several outputs
    is one loop over all of them (Fallback would launch one kernel per output)."""

    def __init__(self, threads: int = 256, vector_bytes: int = 16):
        self.threads = threads
        self.vector_bytes = vector_bytes

    def apply(self, func, target, _tunable):
        sch, infos = _normalized(self, func, target)
        if sch is None:
            return None
        infos = _inline(sch, infos, GPU_CALL_DEPTH)
        if not all(info.is_injective() for info in infos):
            return None
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params if _is_buffer(p) and len(p.ty.shape)),
                     default=4)  # a 0-d buffer (a run-time scalar) is read once, not in vectors
        if len(infos) > 1:
            if _only_output(sch, infos) is not None:
                return self._per_thread(sch, infos, func, widest)
            return self._several_outputs(sch, infos, func, widest)
        info = infos[0]
        loops = sch.get_loops(info.block_rv)
        if not loops:
            return None  # a 0-d kernel (loop counters, scalar math): Fallback gives it one thread
        # a transpose, slice or gather gets 1: Fallback's scalar loads are what it can do
        vector = _contiguous_lanes(sch, loops[-1], max(self.vector_bytes // widest, 1))
        var, block = _innermost_var(sch, loops[-1]), sch.get(info.block_rv)
        if vector > 4 and _computes_bools(_uniform_branches(block, var, vector, probe=True)):
            vector = 4  # CUDA has no 8-lane bool type (a float16 compare or NaN test)
        if vector > 4 and _too_wide(block, vector) and _branched_buffers(block) and not _scalar_calls(block):
            # half math in float32 (`concat(..) * 2.0` of halves) over a concat's pieces: staging
            # through registers would read the pieces an element at a time; 4 lanes load them as
            # vectors and compute in CUDA's widest float vector
            vector = 4
        if vector == 1:
            return None
        _make_branches_uniform(sch, info.block_rv, var, vector)
        extent = _static_product(sch, loops)
        if extent is None or extent % vector or extent < vector * self.threads:
            return None  # ragged or tiny: Fallback's predicated scalar loop handles it
        # through registers: a call TVM can't vectorise would make every load scalar, and a bool
        # buffer can't be a vector in memory (CUDA moves 4 bools as a ushort4: 8 misaligned bytes)
        # and CUDA has no vector of more than 16 bytes: eight halves computed in float32 (gelu, sigmoid
        # in float32) would be a `make_ulonglong4` of eight floats, which NVRTC refuses
        staged = _scalar_calls(sch.get(info.block_rv)) or _has_bool_buffers(func) or _too_wide(
            sch.get(info.block_rv), vector)
        if staged:
            # the lanes split off the row first, so their index has no div/mod: each thread's
            # registers then hold exactly its vector of every buffer
            *outer, inner = loops
            inner, lanes = sch.split(inner, [None, vector])
            blocks, threads = sch.split(sch.fuse(*outer, inner), [None, self.threads])
        else:
            blocks, threads, lanes = sch.split(sch.fuse(*loops), [None, self.threads, vector])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        if staged:
            _through_registers(sch, info.block_rv, threads, lanes)
        else:
            sch.vectorize(lanes)
        return sch

    def _per_thread(self, sch, infos, func, widest):
        """One output and intermediates the inliner kept (an expression past MAX_TREE_SIZE): each
        thread computes its vector of every intermediate into registers, then its vector of the
        output, as CPUElementwise does per vector (Fallback inlined them whole, a tree that grows
        exponentially). Only whole, contiguous, branch-free vectors; anything else stays Fallback's."""
        vector = max(self.vector_bytes // widest, 1)
        if _computes_bools(func):  # CUDA has no 8-lane bool type (a float16 compare or NaN test)
            vector = min(vector, 4)
        blocks = [info.block_rv for info in infos]
        if any(_too_wide(sch.get(block), vector) for block in blocks):
            vector = 4  # half math in float32: 4 lanes, CUDA's widest float vector (see `_too_wide`)
        for block in blocks:
            loops = sch.get_loops(block)
            var = _innermost_var(sch, loops[-1]) if loops else None
            if var is None or _branch_multiples(sch.get(block), var) != [] or _contiguous_lanes(
                    sch, loops[-1], vector) != vector or _scalar_calls(sch.get(block)) or _has_bool_buffers(func):
                return None
        loops = sch.get_loops(blocks[-1])
        extent = _static_product(sch, loops)
        if vector == 1 or extent is None or extent % vector or extent < vector * self.threads:
            return None
        # the lanes split off the row first (as `apply` stages them): each intermediate's region under
        # the thread is then one row's `vector` elements, not a cover of two rows
        *outer, inner = loops
        inner, lanes = sch.split(inner, [None, vector])
        grid, threads = sch.split(sch.fuse(*outer, inner), [None, self.threads])
        sch.bind(grid, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        for block in reversed(blocks[:-1]):  # consumers first: each producer then goes under its consumer
            sch.compute_at(block, threads, preserve_unit_loops=True)
            sch.set_scope(block, 0, "local")
            inner = _fuse(sch, sch.get_loops(block)[2:])
            if get_extent(sch, inner) != vector:
                return None  # a region TVM could not narrow to the thread's vector
            sch.vectorize(inner)
        sch.vectorize(lanes)
        return sch

    def _several_outputs(self, sch, infos, func, widest):
        """Several outputs (AdamW's p, m and v): one loop computes every block's element in turn,
        vectorised where every block's lanes are contiguous, else one predicated scalar loop (Fallback
        would give each output a loop nest, so a launch of its own)."""
        vector = max(self.vector_bytes // widest, 1)
        if _computes_bools(func):  # CUDA has no 8-lane bool type (a float16 compare or NaN test)
            vector = min(vector, 4)
        if not all(sch.get_loops(info.block_rv) for info in infos):
            return None  # a 0-d kernel (loop counters, scalar math): Fallback gives it one thread
        # a transpose, slice or gather, a bool buffer (never a vector in memory, see `apply`): scalar
        lanes_fit = not _has_bool_buffers(func) and all(
            _contiguous_lanes(sch, sch.get_loops(info.block_rv)[-1], vector) == vector
            and not _too_wide(sch.get(info.block_rv), vector) for info in infos)
        fused = _one_loop(sch, [info.block_rv for info in infos])
        if fused is None:
            return None
        extent = sch.get(fused).extent
        if not lanes_fit or not isinstance(extent, tirx.IntImm) or int(extent) % vector \
                or int(extent) < vector * self.threads:
            blocks, threads = sch.split(fused, [None, self.threads])
            sch.bind(blocks, "blockIdx.x")
            sch.bind(threads, "threadIdx.x")
            return sch
        blocks, threads, lanes = sch.split(fused, [None, self.threads, vector])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        sch.vectorize(lanes)
        return sch


def _has_bool_buffers(func) -> bool:
    """Whether a kernel reads or writes a bool buffer (never a vector in memory: see Elementwise)."""
    return any(_is_buffer(p) and str(p.ty.dtype) == "bool" for p in func.params)


def _too_wide(block, lanes: int) -> bool:
    """Whether a block would compute a float vector CUDA has no type for: more than 4 lanes of 32 or
    64 bits (eight halves computed in float32 became a `make_ulonglong4` of eight floats, which NVRTC
    refuses). Integer index arithmetic is not counted: it stays scalar."""
    if lanes <= 4:
        return False
    found = []

    def visit(node):
        ty = getattr(node, "ty", None) if isinstance(node, tvm.ir.Expr) else None
        if isinstance(ty, tvm.ir.PrimType) and is_float_dtype(str(ty.dtype)) and tvm.DataType(
                str(ty.dtype)).bits >= 32:
            found.append(node)
    tvm_ffi.structural_walk(block.body, visit)
    return bool(found)


def _scalar_calls(block) -> bool:
    """Whether a block calls a function TVM's vectoriser has no vector form of (erf, isnan, ...): it
    turns such a vector loop back into a scalar one, loads and stores included."""
    found = []

    def visit(call):
        if isinstance(call.op, tvm.ir.Op) and call.op.name.rsplit(".", 1)[-1] not in _VECTORISED_SPECIALLY and (
                not call.op.get_attr("TVectorizable")):
            found.append(call)
    tvm_ffi.structural_walk(block.body, (tvm.ir.Call, visit))
    return bool(found)


# ops the vectoriser handles itself (by their name without the "tirx."/"prim." prefix)
_VECTORISED_SPECIALLY = {"reinterpret", "if_then_else", "likely", "bitwise_and", "bitwise_or", "bitwise_xor",
                         "bitwise_not", "shift_left", "shift_right"}


def _through_registers(sch, block, threads, lanes) -> None:
    """Each thread loads its inputs into registers and stores its results from them as vectors, and
    computes lane by lane in between: the calls stay scalar, the memory traffic does not. Bool
    buffers and 0-d ones (run-time scalars) are read and written in place, one element at a time."""
    # a buffer read in a branch (concat's pieces) is read at other offsets per branch, and one read
    # at several indices per element (alibi's `pos[k] - pos[q]`) covers a span that moves with the
    # thread: registers would have to hold a whole row, or a vector of no fixed width, so both are
    # read in place
    branched = _branched_buffers(sch.get(block))

    def vectors(region) -> bool:
        return bool(region.region) and str(region.source.dtype) != "bool" and not any(
            region.source.same_as(b) for b in branched) and all(_is_int(r.extent, 1) for r in region.region)
    for index in reversed(range(len(sch.get(block).reads))):
        if vectors(sch.get(block).reads[index]):
            cache = sch.cache_read(block, index, "local")
            sch.compute_at(cache, threads)
            _vectorize_under(sch, cache, threads)
    for index in reversed(range(len(sch.get(block).writes))):
        if vectors(sch.get(block).writes[index]):
            cache = sch.cache_write(block, index, "local")
            sch.reverse_compute_at(cache, threads)
            _vectorize_under(sch, cache, threads)
    sch.unroll(lanes)


def _vectorize_under(sch, block, threads) -> None:
    """Vectorise the loops a register copy got under the thread's loop: none where it copies one
    element per thread (a per-row scale), whose innermost loop is the thread's own (vectorised, a
    vector of `threads` lanes: "VectorizeLoop before LiftStorageAlloc")."""
    loops = sch.get_loops(block)
    below = [i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(threads))]
    inner = loops[below[0] + 1:] if below else []
    if inner:
        sch.vectorize(_fuse(sch, inner))


def _branched_buffers(block) -> set:
    """The buffers a block reads inside an arm of an `if_then_else` (a concat's pieces)."""
    branched = set()

    def visit(call):
        if call.op.same_as(_IF_THEN_ELSE):
            for arm in call.args[1:]:
                tvm_ffi.structural_walk(arm, (tvm.ir.TensorLoad, lambda load: branched.add(load.source)))
    tvm_ffi.structural_walk(block.body, (tvm.ir.Call, visit))
    return branched


class RowReduction(GPUScheduleRule):
    """A reduction over the innermost, contiguous axis (row sum, row max): one block of `threads`
    per row, each thread summing `unroll` coalesced loads per step, then a warp-shuffle reduction
    over 256 partial sums. Dlight's Reduction uses 1024 threads of 4 loads and a 1024-wide tree."""

    def __init__(self, threads: int = 256, unroll: int = 4):
        self.threads = threads
        self.unroll = unroll

    def apply(self, func, target, _tunable):
        sch, info = _single_block(self, func, target)
        if sch is None or not info.is_reduction():
            return None
        dom = info.dom_kind()
        if len(dom) < 2 or not dom.endswith("R") or dom.count("R") != 1:
            return None
        block = info.block_rv
        if len(sch.get(block).writes) != 1:  # argmax's (index, value) pairs: Dlight's GeneralReduction
            return None
        if not _reduces_innermost_axis(sch.get(block)):
            return None
        *spatial, r = sch.get_loops(block)
        extent = sch.get(r).extent
        step = self.threads * self.unroll
        if not isinstance(extent, tirx.IntImm) or int(extent) % step:
            return None
        row = sch.fuse(*spatial)
        _, inner, lane = sch.split(r, [None, self.unroll, self.threads])
        partial = sch.rfactor(lane, 0)  # one partial sum per thread, in a register
        row, outer, inner, lane = sch.get_loops(partial)
        sch.reorder(row, lane, outer, inner)
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        sch.set_scope(partial, 0, "local")
        sch.decompose_reduction(partial, outer)
        sch.unroll(inner)
        sch.reverse_compute_at(block, row, preserve_unit_loops=True)
        _, lane, *rest = sch.get_loops(block)
        if rest:  # the cross-thread reduction needs the thread loop innermost
            sch.reorder(*rest, lane)
        sch.bind(lane, "threadIdx.x")
        return sch


class RowKernel(GPUScheduleRule):
    """A fused row kernel (softmax, a norm, cross-entropy): reductions over the innermost, contiguous
    axis of static width, then an element-wise block over the same rows (or one value per row). One
    block of up to `threads` per row; each thread reads `vector_bytes` per step with one vector load
    into registers, accumulates in registers and the block reduces across threads (warp shuffles);
    the per-row results live in shared memory, and the last block stores whole vectors too. An exp
    that two passes read (a softmax's) is computed once, into each thread's registers. Dlight's
    GeneralReduction does the same with one scalar (2 bytes for halves) per load. Anything else
    (a symbolic width, one that no whole vectors tile, a strided row, a branch on the column) is
    left to Dlight's Reduction and GeneralReduction."""

    # 128 threads: on the H100 a 4096-wide float16 softmax took 36.9 us with 128, 41.5 with 256
    # (more rows in flight per SM); float32 rows took the same with either
    def __init__(self, threads: int = 128, min_threads: int = 32, vector_bytes: int = 16, unroll: int = 64,
                 kept_elements: int = 32):
        self.threads, self.min_threads, self.vector_bytes, self.unroll = threads, min_threads, vector_bytes, unroll
        self.kept_elements = kept_elements  # the most elements a thread keeps of an exp two passes read

    def apply(self, func, target, _tunable):
        sch, infos = _normalized(self, func, target)
        if sch is None:
            return None
        original = list(infos)
        kept = [info for info in infos[:-1] if _math_read_twice(sch, info.block_rv)]
        # a softmax's exp(x - max), read by the row sum and by the division, is computed once per element
        # into registers instead of inlined into both: float16 rows of 4096 on the H100, 33.0 -> 28.3 us
        # (0.77 -> 0.90 of a copy), bfloat16 33.0 -> 26.7 us; only where a thread's share fits registers
        if kept:
            width = get_extent(sch, sch.get_loops(infos[0].block_rv)[-1])
            shape = self._shape(func, width) if isinstance(width, int) else None
            kept = kept if shape is not None and width // shape[1] <= self.kept_elements else []
        infos = _inline(sch, infos, GPU_CALL_DEPTH, keep=[info.block_rv for info in kept])
        if len(infos) < 2 or not infos[-1].is_injective():
            return None
        *reductions, last = [info.block_rv for info in infos]
        dom = infos[0].dom_kind()
        if len(dom) < 2 or dom[:-1] != "S" * (len(dom) - 1) or dom[-1] != "R" or any(
                info.dom_kind() != dom for info in infos[:-1]):
            return None  # one reduced axis, innermost, in every reduction
        n_rows = len(dom) - 1
        rows = [sch.get(loop).extent for loop in sch.get_loops(reductions[0])[:n_rows]]
        width = get_extent(sch, sch.get_loops(reductions[0])[-1])
        if not isinstance(width, int):
            return None
        for block in reductions:
            extents = [sch.get(loop).extent for loop in sch.get_loops(block)]
            if not _same_extents(extents[:-1], rows) or get_extent(sch, sch.get_loops(block)[-1]) != width:
                return None
        last_loops = sch.get_loops(last)
        extents = [sch.get(loop).extent for loop in last_loops]
        if not _same_extents(extents[:n_rows], rows):
            return None
        tail = [get_extent(sch, loop) for loop in last_loops[n_rows:]]
        whole_row = tail == [width]  # else one value per row (cross-entropy's loss), or nothing fits
        if not whole_row and any(t != 1 for t in tail):
            return None
        params = [p for p in func.params if _is_buffer(p)]
        if any(region.source.same_as(p) for block in reductions for region in sch.get(block).writes for p in params):
            return None  # a row statistic is a result too (a training forward): it can't live in shared memory
        shape = self._shape(func, width)
        if shape is None:
            return None
        vector, threads = shape
        if whole_row and _contiguous_lanes(sch, last_loops[-1], vector) != vector:
            return None
        column = _innermost_var(sch, last_loops[-1]) if whole_row else None
        # a unit loop for the thread index apart from the rows' (a split of the row loop would put the
        # thread index into the row's, and the reductions' regions would then span a row per thread)
        rest = last_loops[n_rows:] or [sch.add_unit_loop(last)]
        # the element-wise block first: its row loop is where the reductions then go
        row = _fuse(sch, last_loops[:n_rows])
        if whole_row:
            step, lane, lanes = sch.split(rest[0], [None, threads, vector])
            sch.reorder(lane, step, lanes)
        else:
            _, lane = sch.split(_fuse(sch, rest), [None, threads])  # thread 0 writes the row's value
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        vectors = []  # (block, the row's vars, step): each block's per-step vectors, after `kept`
        if whole_row:
            vectors.append((last, [column], step))
            sch.unroll(lanes)
            self._annotate_unroll(sch, step)
        for block in reversed(_kept_in_order(original[:-1], infos[:-1], kept)):
            if any(block is k.block_rv for k in kept):
                vectors.append((block, [sch.get(block).iter_vars[-1].var], self._in_registers(sch, block, row, threads,
                                                                                               vector)))
                continue
            for index in range(len(sch.get(block).writes)):
                sch.set_scope(block, index, "shared")  # every thread of the row reads the result
            sch.compute_at(block, row, preserve_unit_loops=True)
            loops = sch.get_loops(block)[1:]
            if any(get_extent(sch, loop) != 1 for loop in loops[:-1]) or get_extent(sch, loops[-1]) != width:
                return None  # the reduction's rows are not the element-wise block's rows
            reduced = loops[-1]
            if _contiguous_lanes(sch, reduced, vector) != vector:
                return None
            step, lane, lanes = sch.split(reduced, [None, threads, vector])
            sch.reorder(lane, step, lanes)
            sch.bind(lane, "threadIdx.x")
            vectors.append((block, [iv.var for iv in sch.get(block).iter_vars
                                    if iv.iter_type == tirx.IterVar.CommReduce], step))
            sch.unroll(lanes)
            self._annotate_unroll(sch, step)
        for block, along, step in vectors:
            _row_vectors(sch, block, along, step)
        return sch

    def _in_registers(self, sch, block, row, threads: int, vector: int):
        """Compute a kept block (an exp that two passes read) once per element, into registers: each
        thread its own elements of the row, laid out as (step, thread, lane) like the passes that read
        them, so that `own_thread_slices` can give each thread only its slice. Returns its step loop."""
        sch.set_scope(block, 0, "local")
        sch.compute_at(block, row, preserve_unit_loops=True)
        step, lane, lanes = sch.split(sch.get_loops(block)[-1], [None, threads, vector])
        sch.reorder(lane, step, lanes)
        sch.bind(lane, "threadIdx.x")
        sch.unroll(step)
        sch.unroll(lanes)
        tile = threads * vector
        sch.transform_layout(block, ("write", 0), lambda *i: (*i[:-1], i[-1] // tile, i[-1] // vector % threads,
                                                               i[-1] % vector))
        sch.annotate(block, THREAD_AXIS, len(sch.get(block).writes[0].source.ty.shape) - 2)
        return step

    def _shape(self, func, width: int):
        """(lanes, threads): lanes of `vector_bytes` of the widest buffer that holds rows of this width,
        and the most threads (a power of two, `min_threads` to `threads`) whose vectors tile a row
        exactly. Fewer lanes where that gives 64 threads or more: a block of 32 threads leaves half of
        an SM idle (32 blocks at most per SM). None when no shape tiles the row."""
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params
                      if _is_buffer(p) and len(p.ty.shape) and _is_int(p.ty.shape[-1], width)), default=4)
        lanes = max(self.vector_bytes // max(widest, 1), 1)
        shapes = [(v, self._threads(width, v)) for v in (lanes, lanes // 2) if v >= 1 and v * widest >= 4]
        shapes = [(v, t) for v, t in shapes if t is not None]
        return next((shape for shape in shapes if shape[1] >= 64), shapes[0] if shapes else None)

    def _threads(self, width: int, vector: int) -> int | None:
        """The most threads (a power of two, `min_threads` to `threads`) whose vectors tile a row."""
        threads = self.threads
        while threads >= self.min_threads:
            if width % (threads * vector) == 0:
                return threads
            threads //= 2
        return None

    def _annotate_unroll(self, sch, step) -> None:
        sch.annotate(step, ann_key="pragma_auto_unroll_max_step", ann_val=self.unroll)
        sch.annotate(step, ann_key="pragma_unroll_explicit", ann_val=1)


THREAD_AXIS = "babytriton.thread_axis"


def own_thread_slices(mod: tvm.IRModule) -> tvm.IRModule:
    """Shrink each buffer written by a block annotated THREAD_AXIS (RowKernel's exp in registers) to
    one thread's slice: that axis is the thread index in every access, so each thread's buffer needs
    extent 1 there (index 0). TVM's buffer compaction sees the passes' thread loops as different
    variables and kept the whole row per thread: 4096 halves of stack memory instead of 32 registers."""
    def shrink(func):
        blocks = _all(func.body, s_tir.SBlock)
        axes = {}
        for block in blocks:
            if THREAD_AXIS in block.annotations:
                axes[block.writes[0].source] = int(block.annotations[THREAD_AXIS])
        if not axes:
            return func
        # (the buffer, its one-thread twin, the thread axis)
        slices = [(buf, tvm.ir.Var(buf.name, _retyped(buf.ty, shape=[1 if i == axis else d
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


def _row_vectors(sch, block, along, step) -> None:
    """Each buffer the block reads or writes along its row (the last index uses a var of `along`)
    moves through registers one vector per `step` iteration: one vector load or store, the block
    itself computing lane by lane from the registers. Bool buffers, buffers read in a branch (see
    `_through_registers`), per-row values (the row's max) and the block's accumulators stay in place."""
    branched = _branched_buffers(sch.get(block))
    depth = 1 + [sch.get(loop).same_as(sch.get(step)) for loop in sch.get_loops(block)].index(True)

    def row_vector(region, skip) -> bool:
        return bool(region.region) and str(region.source.dtype) != "bool" and \
            str(region.source.ty.storage_scope) != "local" and not any(
            region.source.same_as(b) for b in skip) and any(_uses(region.region[-1].min, v) for v in along)
    written = [region.source for region in sch.get(block).writes]
    for index in reversed(range(len(sch.get(block).reads))):
        if row_vector(sch.get(block).reads[index], list(branched) + written):
            cache = sch.cache_read(block, index, "local", consumer_blocks=[block])  # the others read x
            sch.compute_at(cache, step)
            loops = sch.get_loops(cache)
            if len(loops) > depth:  # the region is a vector, not one element
                sch.vectorize(loops[-1])
    if sch.get(block).init is not None:
        return  # a reduction's result is written once per row, by the cross-thread reduction
    for index in reversed(range(len(sch.get(block).writes))):
        if row_vector(sch.get(block).writes[index], []):
            cache = sch.cache_write(block, index, "local")
            sch.reverse_compute_at(cache, step)
            loops = sch.get_loops(cache)
            if len(loops) > depth:
                sch.vectorize(loops[-1])


def _same_extents(a, b) -> bool:
    return len(a) == len(b) and all(tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def _contiguous_lanes(sch, inner_loop, lanes: int) -> int:
    """The most lanes (a power of two <= `lanes`, 1 for none) such that that many consecutive, aligned
    steps of the innermost loop read and write as many consecutive, aligned elements of every buffer
    (or one element, broadcast), and take one side of every `if_then_else` on the loop's index (a
    concat's pieces): only then is one vector load or store per buffer the same as the scalar ones."""
    var = _innermost_var(sch, inner_loop)
    if var is None:
        return 1
    block = sch.get(inner_loop).body.block
    multiples = _branch_multiples(block, var)
    if multiples is None:
        return 1  # lanes would take different sides: TVM runs such a "vector" one lane at a time
    accesses = [(a.source, a.indices) for a in _all(block.body, tvm.ir.TensorLoad)]
    accesses += [(a.buffer, a.indices) for a in _all(block.body, tirx.BufferStore)]
    analyzer = tvm.sym.Analyzer()
    for buffer, indices in accesses:
        if not any(_uses(i, var) for i in indices):
            continue  # a 0-d buffer, or the same element for every lane: a broadcast
        *outer, last = indices
        coeffs = detect_linear_equation(last, [var])
        row = buffer.ty.shape[-1]
        if any(_uses(i, var) for i in outer) or len(coeffs) != 2 or not _is_int(coeffs[0], 1) or not isinstance(
                row, tirx.IntImm):
            return 1  # a transpose's lanes are a column apart
        offset = analyzer.modular_set(coeffs[1])  # a split's second piece starts `offset` into the row
        multiples += [int(row), int(offset.coeff), int(offset.base)]
    return _most_lanes(multiples + [int(sch.get(inner_loop).extent)], lanes)


def _innermost_var(sch, inner_loop):
    """The iteration variable of the block directly in `inner_loop` that is that loop's index, or None
    (no such block, a symbolic extent, or the loop feeds other variables too)."""
    loop = sch.get(inner_loop)
    realize = loop.body
    if not isinstance(loop.extent, tirx.IntImm) or not isinstance(realize, s_tir.SBlockRealize):
        return None
    inner = [iv.var for iv, value in zip(realize.block.iter_vars, realize.iter_values) if value.same_as(loop.loop_var)]
    others = [value for value in realize.iter_values if not value.same_as(loop.loop_var)]
    if len(inner) != 1 or any(_uses(value, loop.loop_var) for value in others):
        return None
    return inner[0]


def _most_lanes(multiples, lanes: int) -> int:
    """The largest power of two <= lanes that divides every one of `multiples`."""
    while lanes > 1 and any(m % lanes for m in multiples):
        lanes //= 2
    return lanes


_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
_COMPARES = (tirx.LT, tirx.LE, tirx.GE, tirx.GT)


def _branch_multiples(block, var) -> list[int] | None:
    """What a lane count must divide for each `if_then_else` on `var` in the block (a concat's pick of
    a piece) to take the same side for all lanes: the thresholds of its compares. None when one
    depends on var otherwise (a load, `var == c`)."""
    multiples = []
    for call in _all(block.body, tvm.ir.Call):
        if call.op.same_as(_IF_THEN_ELSE) and _uses(call.args[0], var):
            bounds = _thresholds(call.args[0], var)
            if bounds is None:
                return None
            multiples += bounds
    return multiples


def _thresholds(cond, var) -> list[int] | None:
    """The integers t where `cond` may change value along `var`: each compare of `var + c` with a
    constant flips between var = t - 1 and t. None when cond depends on var any other way."""
    if isinstance(cond, (tirx.And, tirx.Or)):
        a, b = _thresholds(cond.a, var), _thresholds(cond.b, var)
        return None if a is None or b is None else a + b
    if isinstance(cond, tirx.Not):
        return _thresholds(cond.a, var)
    if not _uses(cond, var):
        return []
    bound = _threshold(cond, var)
    return None if bound is None else [bound[0]]


def _threshold(cond, var):
    """A compare of `var + c` with a constant as (t, above): `var >= t` if above, else `var < t`."""
    if not isinstance(cond, _COMPARES):
        return None
    coeffs = detect_linear_equation(cond.a - cond.b, [var])
    if len(coeffs) != 2 or not isinstance(coeffs[1], tirx.IntImm) or not (
            _is_int(coeffs[0], 1) or _is_int(coeffs[0], -1)):
        return None
    c, less = int(coeffs[1]), isinstance(cond, (tirx.LT, tirx.LE))
    if _is_int(coeffs[0], -1):  # c - var < 0 is var - c > 0
        c, less = -c, not less
    strict = isinstance(cond, (tirx.LT, tirx.GT))
    # var + c < 0: var < -c; var + c <= 0: var < 1 - c; var + c >= 0: var >= -c; var + c > 0: var >= 1 - c
    return (-c if strict == less else 1 - c), not less


def _uniform_branches(block, var, lanes: int, probe: bool = False):
    """The block with each `if_then_else` condition on `var` reading var only through `var // lanes`:
    the same value, so one side, for all lanes of a vector, which TVM then loads whole (a vector whose
    lanes may go apart it runs one lane at a time). `var >= t` is `var // lanes >= t // lanes` for every
    var when lanes divides t (`_branch_multiples`). `probe`: such conditions become `True` instead,
    to see what else computes bools."""
    def uniform(cond):
        if isinstance(cond, (tirx.And, tirx.Or)):
            return type(cond)(uniform(cond.a), uniform(cond.b))
        if isinstance(cond, tirx.Not):
            return tirx.Not(uniform(cond.a))
        if not _uses(cond, var):
            return cond
        t, above = _threshold(cond, var)
        quotient, bound = tirx.floordiv(var, tirx.const(lanes, var.ty.dtype)), tirx.const(t // lanes, var.ty.dtype)
        return quotient >= bound if above else quotient < bound

    def call(node):
        if not node.op.same_as(_IF_THEN_ELSE) or not _uses(node.args[0], var):
            return node
        return tirx.if_then_else(tirx.const(True) if probe else uniform(node.args[0]), node.args[1], node.args[2])
    return tvm_ffi.structural_map(block, [(tvm.ir.Call, call)])


def _make_branches_uniform(sch, block_rv, var, lanes: int) -> None:
    """Replace the block by `_uniform_branches` of it, in place (its block and loop handles stay valid)."""
    old = sch.get(block_rv)
    new = _uniform_branches(old, var, lanes)
    if not new.same_as(old):
        sch.state.replace(sch.get_sref(block_rv), new, {old: new})


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(expr))


def _is_int(expr, value: int) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr) == value


def _computes_bools(node) -> bool:
    """Whether a kernel (or block) computes a bool anywhere (a compare, a NaN test, a select's condition)."""
    found = []

    def visit(node):
        ty = getattr(node, "ty", None) if isinstance(node, tvm.ir.Expr) else None
        # a constant (a block's `T.bool(True)` predicate) is never a vector of bools
        if isinstance(ty, tvm.ir.PrimType) and str(ty.dtype).startswith("bool") and not isinstance(node, tirx.IntImm):
            found.append(node)
    tvm_ffi.structural_walk(getattr(node, "body", node), visit)
    return bool(found)


class SplitReduction(GPUScheduleRule):
    """A reduction to few results over contiguous elements (`x.sum()`, `x.mean()`, a row sum of 4 long
    rows), with any element-wise epilogue: Dlight gives each result one block, or one thread, and leaves
    the GPU idle. Here the reduction is cut into equal chunks, up to `parts` per result (rfactor); a
    block sums each chunk (coalesced loads, then a cross-thread reduction) into a buffer of partial
    results, and a second kernel folds them with one block per result. The chunks must divide the size
    exactly: TVM lowers no cross-thread reduction under a predicate that mixes the block index in (a
    ragged last chunk), it would leave racing threads. A symbolic or prime size is instead shared out
    element by element over a fixed grid of threads, each summing into a register of its own (no
    cross-thread reduction in that kernel), and the fold reduces their partial results."""

    def __init__(self, threads: int = 256, parts: int = 1024, max_rows: int = 32, min_chunk: int = 4096,
                 strided_threads: int = 32768):
        self.threads, self.parts, self.max_rows, self.min_chunk = threads, parts, max_rows, min_chunk
        self.strided_threads = strided_threads

    def apply(self, func, target, _tunable):
        sch, infos = _normalized(self, func, target)
        if sch is None:
            return None
        blocks = [b.block_rv for b in _inline(sch, infos[:-1], GPU_CALL_DEPTH)] + [infos[-1].block_rv]
        red, epilogues = blocks[0], blocks[1:]
        if not _reduce_count(sch, red) or any(_reduce_count(sch, b) for b in epilogues):
            return None
        if len(sch.get(red).writes) != 1:  # online softmax's (sum, max) pairs: GeneralReduction
            return None
        loops = sch.get_loops(red)
        n_rows = len(loops) - _reduce_count(sch, red)
        rows = _static_product(sch, loops[:n_rows])
        if rows is None or rows > self.max_rows or not _contiguous_reduction(sch, red):
            return None
        for b in epilogues:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
        k = _fuse(sch, sch.get_loops(red)[n_rows:])
        extent = get_extent(sch, k)
        parts = self._parts(extent)
        if parts > 1:
            sch.split(k, [parts, None])
            rf = sch.rfactor(sch.get_loops(red)[-2], factor_axis=0)
            *spatial, inner = sch.get_loops(rf)
            _, lane = sch.split(inner, [None, self.threads])
            wide = [loop for loop in spatial if get_extent(sch, loop) != 1] or spatial[:1]
            sch.bind(_fuse(sch, wide), "blockIdx.x")
            sch.bind(lane, "threadIdx.x")
        elif not isinstance(extent, int) or extent > 2 * self.min_chunk:
            # a symbolic size, or one no equal chunks divide: every thread of a fixed grid sums a
            # strided share (element i goes to thread i mod the grid's size: coalesced) into a partial
            # result of its own, so no cross-thread reduction runs under the ragged end's predicate
            grid_size = self.strided_threads if not isinstance(extent, int) else \
                min(self.strided_threads, 1 << ((extent // 8).bit_length() - 1))
            _, across = sch.split(k, [None, grid_size])
            rf = sch.rfactor(across, factor_axis=0)
            *rows, serial, lanes = sch.get_loops(rf)
            sch.reorder(lanes, serial)
            grid, lane = sch.split(lanes, [None, self.threads])
            if rows:
                sch.reorder(grid, lane, *rows)
            sch.bind(grid, "blockIdx.x")
            sch.bind(lane, "threadIdx.x")
            # the partial accumulates in a register, set before the loop (a thread with no element
            # in range still writes the reduction's identity), and is stored once
            partial = sch.cache_write(rf, 0, "local")
            sch.reverse_compute_at(partial, sch.get_loops(rf)[-2])
            sch.decompose_reduction(rf, sch.get_loops(rf)[-1])
        *spatial, reduced = sch.get_loops(red)  # the fold of the partial results, or the whole reduction
        if not spatial:
            spatial = [sch.add_unit_loop(red)]
        row = _fuse(sch, spatial)
        _, lane = sch.split(reduced, [None, self.threads])
        sch.bind(row, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        if epilogues:  # every thread holds the folded value: the epilogue reads a register
            sch.set_scope(red, 0, "local")
        for epilogue in reversed(epilogues):
            sch.reverse_compute_at(epilogue, row, preserve_unit_loops=True)
        return sch

    def _parts(self, extent) -> int:
        """The most chunks, up to `parts`, of at least `min_chunk` elements that divide `extent`."""
        if not isinstance(extent, int):
            return 1
        for parts in range(min(self.parts, extent // self.min_chunk), 1, -1):
            if extent % parts == 0:
                return parts
        return 1


def _reduces_innermost_axis(block) -> bool:
    """Whether every buffer the reduction reads is indexed by the reduction variable last (coalesced)."""
    reduce_vars = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    if len(reduce_vars) != 1:
        return False
    var = reduce_vars[0]
    written = [region.source for region in block.writes]
    reads = [region for region in block.reads if not any(region.source.same_as(w) for w in written)]
    return bool(reads) and all(
        any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(region.region[-1].min)) for region in reads)


def _is_buffer(param) -> bool:
    try:
        param.ty.dtype
    except AttributeError:
        return False
    return True


RULE_ATTR = "babytriton.rule"  # the PrimFunc attribute naming the rule that scheduled it (k.fusion)


class Guarded(dl.ScheduleRule):
    """A Dlight rule that declines a kernel it fails on, so the next rule (or none) takes it: e.g.
    the CPU GEMV rule asserts on a reduction fused after a broadcast (found by the fuzzer). The
    kernel it schedules is tagged with the rule's name (RULE_ATTR), which `k.fusion` shows."""

    def __init__(self, rule, guard: bool = True):
        self.rule, self.guard = rule, guard

    def apply(self, func, target, tunable):
        try:
            space = self.rule.apply(func, target, tunable)
        except Exception:  # noqa: BLE001 - a rule's own bug must not fail the compile
            if not self.guard:
                raise
            return None
        if isinstance(space, s_tir.Schedule):
            return s_tir.Schedule(space.mod["main"].with_attr(RULE_ATTR, rule_name(self.rule)))
        return space

    def __repr__(self):
        return f"Guarded({rule_name(self.rule)})"


class LongRows(dl.ScheduleRule):
    """Dlight's GeneralReduction (one block per row) with its row loops unrolled only when they are
    short. GeneralReduction unrolls every loop of up to 256 steps into straight code: a 32,000-wide
    row (125 steps of 256 threads) became thousands of lines per pass, and a backward with two such
    passes ran 8x slower than one pass took. A longer loop stays a loop, which nvcc unrolls a few
    steps at a time."""

    def __init__(self, rule, max_unrolled: int = 32):
        self.rule, self.max_unrolled = rule, max_unrolled

    def apply(self, func, target, tunable):
        sch = self.rule.apply(func, target, tunable)
        if not isinstance(sch, s_tir.Schedule):
            return sch
        done = set()
        for realize in _all(sch.mod["main"].body, s_tir.SBlockRealize):
            for loop in sch.get_loops(sch.get_sblock(realize.block.name_hint)):
                node = sch.get(loop)
                if node.loop_var in done or "pragma_auto_unroll_max_step" not in node.annotations:
                    continue
                done.add(node.loop_var)
                if not isinstance(node.extent, tirx.IntImm) or int(node.extent) > self.max_unrolled:
                    sch.unannotate(loop, "pragma_auto_unroll_max_step")
                    sch.unannotate(loop, "pragma_unroll_explicit")
        return sch


def rule_name(rule) -> str:
    """babytriton's rules by class name, Dlight's as dlight.gpu.Matmul, through wrappers."""
    while hasattr(rule, "rule"):
        rule = rule.rule
    module = type(rule).__module__
    if ".dlight." in module:
        return "dlight." + module.split(".dlight.")[1].split(".")[0] + "." + type(rule).__name__
    return type(rule).__name__


# --------------------------------------------------------------------------------------------------
# babytriton's CPU rules (see the cookbook's Recipe 12 for the measurements behind each choice)
# --------------------------------------------------------------------------------------------------

MIN_PARALLEL = 1 << 14   # work below this stays on the calling thread: a launch costs more
# An element-wise chain's bar is higher: one pass over its elements is all the work there is. Measured
# on torch's OpenMP threads (threads.py), sigmoid((a + b) * a - b) and GELU-tanh over 2^15 floats took
# 13 and 11 us in parallel against 21 and 19 on one thread (16-core Xeon; 2 Zen 5 cores: 7.3 against
# 9.2), and 2^14 floats took as long either way.
MIN_PARALLEL_ELEMENTWISE = 1 << 15
# A reduction's passes (one per block of a row) over 2^16 elements still ran faster on one thread: a
# 256x256 sum took 3.4 us there and 3.8 on two Zen 5 cores.
MIN_PARALLEL_REDUCTION = 1 << 16


class CPURule(dl.ScheduleRule):
    """A rule for llvm targets: `schedule(sch, infos, target)` returns whether it scheduled the kernel."""

    def is_target_available(self, target) -> bool:
        return target.kind.name == "llvm"

    def apply(self, func, target, _tunable):
        sch, infos = _normalized(self, func, target)
        return sch if sch is not None and self.schedule(sch, infos, target) else None


def _vector_lanes(sch, target) -> int:
    """Lanes of one vector register for the widest element the kernel touches (16 float32 with AVX-512)."""
    width = 64 if tvm.target.codegen.target_has_features("avx512f", target) else 32
    func = sch.mod["main"]
    widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params if _is_buffer(p)), default=4)
    return max(width // max(widest, 1), 1)


def _pow2_divisor(extent, cap: int) -> int:
    """The largest power of two <= cap that divides a static extent (1 for a symbolic or zero one)."""
    if not isinstance(extent, int) or extent <= 0:
        return 1
    v = 1
    while v * 2 <= cap and extent % (v * 2) == 0:
        v *= 2
    return v


def _fuse(sch, loops):
    return loops[0] if len(loops) == 1 else sch.fuse(*loops)


def _reduce_count(sch, block) -> int:
    return sum(iv.iter_type == tirx.IterVar.CommReduce for iv in sch.get(block).iter_vars)


def _contiguous_reduction(sch, block) -> bool:
    """Whether every buffer the reduction reads along the reduced axes has a reduced variable in its
    last index: consecutive reduction steps read consecutive elements (a row sum, not a column sum).
    Reads that do not depend on the reduced axes (softmax's row maximum) don't matter."""
    stmt = sch.get(block)
    reduced = {iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.CommReduce}
    written = [region.source for region in stmt.writes]
    along = 0
    for region in stmt.reads:
        if any(region.source.same_as(w) for w in written):
            continue
        used = [set(tvm.tirx.analysis.undefined_vars(r.min)) for r in region.region]
        if not any(u & reduced for u in used):
            continue
        # the last axis that has more than one element (a (n, 1) buffer is read along its first)
        shape = region.source.shape
        wide = [u for u, d in zip(used, shape) if not (isinstance(d, tirx.IntImm) and int(d) == 1)]
        if not wide or not wide[-1] & reduced:
            return False
        along += 1
    return along > 0


def _static_product(sch, loops):
    """The product of the loops' extents, or None when one is symbolic."""
    total = 1
    for loop in loops:
        extent = get_extent(sch, loop)
        if not isinstance(extent, int):
            return None
        total *= extent
    return total


MAX_CALL_DEPTH = 2  # math calls nested in one inlined expression (see `_inline`); 3 tanh: 7 s of LLVM
_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "body")


# calls whose lowering names their argument once: they don't grow an inlined expression. (Not
# `reinterpret`, legalize.subtract's guard: a bfloat16 x - y under sigmoid under tanh, inlined, had
# TVM's bf16 lowering bind the fast exp's variable twice; fuzz 9201028023.)
_LINEAR_CALLS = {f"tirx.{name}" for name in ("sqrt", "rsqrt", "pow", "fabs", "floor", "ceil", "round", "trunc",
                                             "nearbyint", "isnan", "isinf", "isfinite",
                                             "copysign", "if_then_else", "log", "exp", "sin", "cos")}


def _call_depth(expr) -> int:
    """How deeply math calls that repeat their argument (tanh, erf) nest in an expression:
    tanh(erf(x)) is 2, sqrt(x / pow(b, n)) is 0."""
    if isinstance(expr, tvm.ir.expr.Call):
        if legalize.is_kept(expr):  # the guard's round trip through an integer: two bit casts, no work
            return _call_depth(expr.args[0].args[0])
        inner = max((_call_depth(arg) for arg in expr.args), default=0)
        linear = isinstance(expr.op, tvm.ir.Op) and expr.op.name in _LINEAR_CALLS
        return inner + (0 if linear else 1)
    return max((_call_depth(getattr(expr, f)) for f in _FIELDS if isinstance(getattr(expr, f, None), tvm.ir.expr.Expr)),
               default=0)


def _block_value(sch, block):
    """The expression a block stores (None for a block that is no single store)."""
    body = sch.get(block).body
    return body.value if isinstance(body, tirx.BufferStore) else None


def _block_depth(sch, block) -> int:
    value = _block_value(sch, block)
    return _call_depth(value) if value is not None else 0


# On a GPU no call depth limits inlining: CUDA calls tanhf (erff, expf) on its argument written once,
# and nvcc computes a call repeated on the same value once (a GELU-tanh backward's nine tanh: one
# ex2 in the PTX). Kept buffers cost more there: the kernel leaves Elementwise for Fallback's scalar
# loads. The tree size still bounds what TVM's simplifier walks.
GPU_CALL_DEPTH = None

MAX_TREE_SIZE = 4000  # nodes of one inlined expression, counted as a tree (as the simplifier walks it)


def _tree_size(expr, memo: dict, leaf=None) -> int:
    """Nodes of `expr` counted as a tree (a shared subexpression once per use), in time linear in
    the DAG; with `leaf`, only the nodes that are instances of `leaf`."""
    key = expr.__hash__()
    if key in memo:
        return memo[key][1]
    children = [getattr(expr, f) for f in _FIELDS if isinstance(getattr(expr, f, None), tvm.ir.expr.Expr)]
    if isinstance(expr, tvm.ir.expr.Call):
        children += list(expr.args)
    if isinstance(expr, tvm.ir.expr.TensorLoad):
        children += list(expr.indices)
    own = 1 if leaf is None or isinstance(expr, leaf) else 0
    total = own + sum(_tree_size(c, memo, leaf) for c in children)
    memo[key] = (expr, total)  # the expression kept alive: its hash (an address) stays its own
    return total


def _block_size(sch, block, leaf=None) -> int:
    """The tree size of the block's stored expression (`leaf`: of its nodes of that kind only)."""
    value = _block_value(sch, block)
    return _tree_size(value, {}, leaf) if value is not None else 0


def _inline(sch, infos, max_depth: int | None = MAX_CALL_DEPTH, keep=()):
    """Dlight's `try_inline` with limits: a producer goes into its consumers only while the math calls
    nested in one expression stay within `max_depth`. LLVM's lowering of tanh (or erf) names its
    argument several times, so forty inlined tanh would be a 5**40-node expression; the chain keeps a
    buffer every few calls instead. GPU rules pass None (GPU_CALL_DEPTH): see there. Blocks in `keep`
    stay blocks."""
    kept = [sch.get(b) for b in keep]
    blocks = [info for info in infos if not any(sch.get(info.block_rv).same_as(k) for k in kept)]

    def fits(block, others) -> bool:
        if max_depth is not None and _block_depth(sch, block) + max(
                (_block_depth(sch, o) for o in others), default=0) > max_depth:
            return False
        # and the expression stays small: NaN-aware max/min and floor `//` name each operand several
        # times, so a chain of them inlined grows exponentially (5 unrolled `maximum`s kept TVM's
        # simplifier busy for hours: fuzz 9200028250)
        size = _block_size(sch, block)
        return all(_block_size(sch, o) + size * _block_size(sch, o, tvm.ir.expr.TensorLoad) <= MAX_TREE_SIZE
                   for o in others)

    def trial(inline, neighbours):
        for i, info in enumerate(blocks):
            if not fits(info.block_rv, neighbours(info.block_rv)):
                continue
            try:
                inline(info.block_rv)
            except Exception:  # noqa: BLE001 - not inlinable (TVM raises several types): the next block
                continue
            return i
        return None

    def reverse_inline(block):
        # never into a reduction: a reduction over a unit axis may pass TVM's check (normalising
        # dropped the axis) and the epilogue would then run on its init and on its update too
        if any(sch.get(p).init is not None for p in sch.get_producers(block)):
            raise ValueError("a producer is a reduction")
        sch.reverse_compute_inline(block)

    while True:
        i = trial(sch.compute_inline, sch.get_consumers)
        if i is None:
            i = trial(reverse_inline, sch.get_producers)
        if i is None:
            return blocks
        blocks.pop(i)


# Float intrinsics that TVM 0.27 cannot lower for a vector on llvm (compiling each one vectorised:
# "unknown intrinsic"); a kernel that calls one keeps scalar loops, which LLVM's loop vectorizer takes.
_SCALAR_ONLY = ("cosh", "sinh")


def _vectorizable(sch) -> bool:
    text = sch.mod["main"].script()
    return not any(f"T.{name}(" in text for name in _SCALAR_ONLY) and not _stores_bf16_constant(sch.mod["main"])


def _stores_bf16_constant(func) -> bool:
    """Whether a block stores a bfloat16 constant (`full_like(x, nan)`): TVM's bfloat16 storage
    legalization retypes a vectorised store to uint16 lanes but keeps the broadcast constant's
    bfloat16 type, which the build refuses. LLVM's loop vectorizer takes such a fill loop instead."""
    return any(str(store.value.ty.dtype if hasattr(store.value, "ty") else store.value.dtype) == "bfloat16"
               and isinstance(store.value, tirx.FloatImm) for store in _all(func.body, tirx.BufferStore))


# A vector through an exp, erf or tanh polynomial and a division, or through half-precision rounding
# (float16: a conversion there and back per operation), is a long chain of dependent instructions: one
# vector per loop step leaves the core waiting on it. Four independent vectors per step overlap
# (one Zen 5 core: float16 sigmoid((a+b)*a-b) 0.53 -> 0.31 ns per element, float16 GELU-tanh
# 0.67 -> 0.40); a copy or an add is bound by memory and keeps one register.
LONG_CHAIN_VECTORS = 4
_LONG_LATENCY_CALLS = {f"tirx.{name}" for name in ("exp", "exp2", "exp10", "erf", "tanh", "sigmoid", "log",
                                                   "log2", "log10", "log1p", "pow", "sin", "cos", "tan",
                                                   "atan", "sinh", "cosh", "asin", "acos", "asinh",
                                                   "acosh", "atanh", "atan2")}


def _vectors_per_step(sch) -> int:
    """Registers of lanes per vectorised step: LONG_CHAIN_VECTORS for a kernel of long-latency math
    calls or of float16 / bfloat16 buffers, else one."""
    func = sch.mod["main"]
    if any(str(tvm.DataType(p.ty.dtype)) in ("float16", "bfloat16") for p in func.params if _is_buffer(p)):
        return LONG_CHAIN_VECTORS
    return LONG_CHAIN_VECTORS if _calls_long_math(func.body) else 1


def _calls_long_math(node) -> bool:
    """Whether `node` calls an exp, erf, tanh or other of _LONG_LATENCY_CALLS."""
    calls = []
    tvm_ffi.structural_walk(node, (tvm.ir.expr.Call, calls.append))
    return any(isinstance(c.op, tvm.ir.Op) and c.op.name in _LONG_LATENCY_CALLS for c in calls)


class CPUElementwise(CPURule):
    """Injective kernels: inline every intermediate (one loop nest, no temporary buffers), fuse the
    loops, vectorise the innermost `lanes` (a register, or several for a long chain: `_vectors_per_step`)
    and run the rest in parallel. An odd or symbolic size is only parallelised: LLVM's loop vectorizer
    then takes each thread's range."""

    def schedule(self, sch, infos, target):
        if not all(info.is_injective() for info in infos):
            return False
        lanes = _vector_lanes(sch, target) * _vectors_per_step(sch) if _vectorizable(sch) else 1
        infos = _inline(sch, infos)
        if _into_one_output(sch, infos, lanes):
            return True
        # several outputs (AdamW's p, m and v): one loop nest, each element's inputs read once
        merged = _one_loop(sch, [info.block_rv for info in infos]) if len(infos) > 1 else None
        nests = [(None, [merged])] if merged is not None else [(info.block_rv, sch.get_loops(info.block_rv))
                                                               for info in infos]
        for block, loops in nests:
            if not loops:
                continue  # a 0-d kernel: nothing to spread
            most = lanes if block is None else _uniform_lanes(sch, block, loops[-1], lanes)
            fused = _fuse(sch, loops)
            extent = get_extent(sch, fused)
            vector = _pow2_divisor(extent, most)
            outer = fused
            if vector > 1:
                outer, inner = sch.split(fused, [None, vector])
                sch.vectorize(inner)
            if not isinstance(extent, int) or extent >= MIN_PARALLEL_ELEMENTWISE:
                sch.parallel(outer)
        return True


def _only_output(sch, infos):
    """The block of a kernel's one output when it is the last of `infos` and every other block is an
    intermediate over the same static iteration space (one value per output element)."""
    if len(infos) < 2:
        return None
    extents = [[get_extent(sch, loop) for loop in sch.get_loops(info.block_rv)] for info in infos]
    if not all(isinstance(e, int) for e in extents[-1]) or any(e != extents[-1] for e in extents):
        return None
    params = [p for p in sch.mod["main"].params if tirx.is_buffer_var(p)]
    outputs = [info for info in infos if any(w.source.same_as(p) for w in sch.get(info.block_rv).writes for p in params)]
    return infos[-1].block_rv if len(outputs) == 1 and outputs[0] is infos[-1] else None


def _shared_calls(sch, infos) -> bool:
    """Whether two blocks compute the same math call (tanh of the same expression of the same element):
    computed per vector in one loop body, LLVM computes it once; in loops of their own, once per
    block. Without such a call, separate streaming loops are as fast (a tanh chain's own values)."""
    seen = set()
    for info in infos:
        value = _block_value(sch, info.block_rv)
        if value is None:
            continue
        calls = []
        tvm_ffi.structural_walk(value, (tvm.ir.expr.Call, calls.append))
        mine = {tvm_ffi.structural_hash(c, map_free_vars=True) for c in calls if isinstance(c.op, tvm.ir.Op)
                and c.op.name not in _LINEAR_CALLS and c.op.name != "tirx.reinterpret"}
        if mine & seen:
            return True
        seen |= mine
    return False


def _into_one_output(sch, infos, lanes: int) -> bool:
    """A kernel of one output block and intermediates that `_inline` kept (a backward's chain of tanh
    derivatives): each intermediate computed per vector of the output, inside its parallel loop, into
    a buffer of `lanes` elements, instead of a full-size buffer written and read back by a loop of its
    own. Intermediates keep each value computed once, which inlining would repeat per use."""
    out = _only_output(sch, infos)
    if out is None or not _shared_calls(sch, infos):
        return False
    fused = _fuse(sch, sch.get_loops(out))
    extent = get_extent(sch, fused)
    vector = _pow2_divisor(extent, lanes)
    if vector <= 1 or extent < MIN_PARALLEL_ELEMENTWISE:
        return False
    outer, inner = sch.split(fused, [None, vector])
    for info in reversed(infos[:-1]):  # consumers first: each producer then goes under its consumer
        sch.compute_at(info.block_rv, outer, preserve_unit_loops=True)
        sch.vectorize(_fuse(sch, sch.get_loops(info.block_rv)[1:]))
    sch.vectorize(inner)
    sch.parallel(outer)
    return True


def _uniform_lanes(sch, block_rv, inner_loop, lanes: int) -> int:
    """At most `lanes`, fewer where that lets each `if_then_else` on the innermost index (a concat's
    pick of a piece) take one side per vector, which then loads whole; the block says so in its
    conditions (`_make_branches_uniform`). Conditions no lane count makes uniform leave `lanes`."""
    var = _innermost_var(sch, inner_loop)
    multiples = _branch_multiples(sch.get(block_rv), var) if var is not None else None
    if not multiples:
        return lanes
    most = _most_lanes(multiples + [int(sch.get(inner_loop).extent)], lanes)
    if most > 1:
        _make_branches_uniform(sch, block_rv, var, most)
    return most if most > 1 else lanes


class CPUReduction(CPURule):
    """Reductions, alone or in a kernel with element-wise blocks (softmax, layernorm, mean):

    * rows (a reduction over contiguous elements, at least `min_rows` of them): one row per parallel
      iteration; the row is summed into `accum` partial results that fill vector registers (rfactor),
      then folded. A kernel of several blocks over the same rows (softmax: max, exp-sum, divide)
      inlines its element-wise blocks and computes every block per row inside one parallel loop.
    * a full reduction, or too few rows: the reduction is first cut into `parts` chunks (rfactor)
      that become the parallel rows; the final fold of `parts` values, and any epilogue, is tiny.
    * columns (`x.sum(axis=0)`, a middle axis): parallel over the kept elements, the reduction loop
      outside a vector of contiguous kept elements.
    `decompose_reduction` comes last: after it TVM refuses to vectorise or parallelise loops above."""

    def __init__(self, accum: int = 64, parts: int = 256, min_rows: int = 64):
        self.accum, self.parts, self.min_rows = accum, parts, min_rows

    def schedule(self, sch, infos, target):
        if all(info.is_injective() for info in infos):
            return False
        lanes = _vector_lanes(sch, target)
        keep = [info for info in infos[:-1] if _math_read_twice(sch, info.block_rv)]
        remaining = _inline(sch, infos[:-1], keep=[info.block_rv for info in keep])
        blocks = _kept_in_order(infos[:-1], remaining, keep) + [infos[-1].block_rv]
        reductions = [b for b in blocks if _reduce_count(sch, b)]
        if not reductions:
            return False
        first = reductions[0]
        loops = sch.get_loops(first)
        rows = _static_product(sch, loops[:len(loops) - _reduce_count(sch, first)])
        work = _static_product(sch, loops)
        # a launch costs more than a small reduction; each block is a pass over the rows
        passes = len(blocks)
        self.threads = work is None or work * passes > MIN_PARALLEL_REDUCTION
        self.vectors = _vectorizable(sch)
        many_rows = rows is None or rows >= self.min_rows
        if any(len(sch.get(b).writes) > 1 for b in reductions):
            return self._pairs(sch, blocks, first, many_rows)
        if len(blocks) == 1:
            return self._single(sch, first, lanes, many_rows)
        if _reduce_count(sch, blocks[-1]):
            return False
        if many_rows and all(_contiguous_reduction(sch, b) for b in reductions):
            return self._rows(sch, blocks, reductions, lanes)
        for b in blocks:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
        if len(reductions) == 1 and blocks.index(first) == 0:
            # a mean, an RMS norm: the reduction as one block would be, then its epilogue (as many
            # elements as the input where it scales the rows) in parallel and vectorised
            self._single(sch, first, lanes, many_rows)
            for b in blocks[1:]:
                self._spread(sch, b, lanes)
            return True
        if all(_contiguous_reduction(sch, b) for b in reductions):
            if rows == 1 or self.threads and self._long(sch, first, rows):
                return self._passes(sch, blocks, lanes)
            # few rows (32 softmax rows): still one row per parallel iteration, each row vectorised
            return self._rows(sch, blocks, reductions, lanes)
        return False

    def _pairs(self, sch, blocks, first, many_rows):
        """argmax's (index, value) pairs. Many rows: the rows in parallel, each reduced in order
        (rfactor into vectors mixed up its NaN-aware combiner). A whole-tensor argmax: cut into chunks
        (`_cut`) reduced in parallel, each in order and without vectors, then their pairs folded. The
        combiner orders pairs totally (a NaN first, then the better value, then the smaller index) and
        the identity loses to any element, so any order of folding gives torch's pair: the first index
        of the maximum, or of the first NaN."""
        if not self.threads:
            return False
        loops = sch.get_loops(first)
        n_rows = len(loops) - _reduce_count(sch, first)
        if many_rows:
            if len(blocks) != 1 or not n_rows:
                return False
            sch.parallel(_fuse(sch, loops[:n_rows]))
            return True
        whole = not n_rows or _static_product(sch, loops[:n_rows]) == 1
        if not whole or not any("int" in str(w.source.dtype) for w in sch.get(first).writes):
            # left to the other rules (Dlight's: rows in parallel): a few rows cut into chunks gave a
            # bfloat16 argmax (its values cast to float32) chunk-local indices, and an online softmax's
            # (sum, max) pairs wrong sums
            return False
        for b in blocks:
            if not sch.get_loops(b):  # rfactor fails on a neighbour block without loops
                sch.add_unit_loop(b)
        rf = self._cut(sch, first, n_rows)
        *chunks, inner = sch.get_loops(rf)
        sch.parallel(_fuse(sch, chunks))
        sch.decompose_reduction(rf, inner)
        sch.decompose_reduction(first, sch.get_loops(first)[-1])
        return True

    FEW_ROWS = 16        # rows fewer than this, each at least LONG_ROW long: a pass per block (`_passes`)
    LONG_ROW = 8192
    CHUNK = 4096         # an odd or symbolic row's chunk in an element-wise pass (`_spread`)

    def _long(self, sch, block, rows) -> bool:
        """Whether a reduction's rows are few and long: one row per parallel iteration would leave
        threads idle (a logsumexp of one row of 200,000: one thread)."""
        loops = sch.get_loops(block)
        extent = _static_product(sch, loops[len(loops) - _reduce_count(sch, block):])
        return rows is not None and rows < self.FEW_ROWS and (extent is None or extent >= self.LONG_ROW)

    def _passes(self, sch, blocks, lanes):
        """Few long rows and several blocks (a softmax, layernorm or logsumexp of a few rows of
        100,000), or one row of any length: each block is a pass of its own over every row, a
        reduction cut into chunks that run in parallel (`_single`), an element-wise block spread in
        parallel and vectorised (`_spread`), rather than each row on one thread."""
        for b in blocks:
            if _reduce_count(sch, b):
                self._single(sch, b, lanes, many_rows=False)
            else:
                self._spread(sch, b, lanes)
        return True

    def _spread(self, sch, block, lanes):
        """An element-wise block in a loop nest of its own (the epilogue of a reduction cut into
        chunks: the scaling of an RMS norm's rows, a mean's division): its loops fused, the innermost
        `lanes` vectorised and the rest in parallel, as CPUElementwise does. Where the size has no
        whole vectors and its rows are long (an odd or symbolic row) the rows go in parallel in
        chunks of CHUNK elements, whose contiguous loop LLVM vectorises."""
        loops = sch.get_loops(block)
        if not loops:
            return
        total = _static_product(sch, loops)
        threads = total is None or total >= MIN_PARALLEL_ELEMENTWISE
        *outer, inner = loops
        row = get_extent(sch, inner)
        long_row = not isinstance(row, int) or row >= 2 * self.CHUNK
        most = _uniform_lanes(sch, block, inner, lanes) if self.vectors else 1
        vector = _pow2_divisor(total, most) if total is not None else 1
        if vector > 1 and (vector == most or not long_row):
            fused, lane = sch.split(_fuse(sch, loops), [None, vector])
            sch.vectorize(lane)
            if threads:
                sch.parallel(fused)
        elif threads and long_row and outer:  # (a fused index would divide by the odd row per element)
            chunks, _ = sch.split(inner, [None, self.CHUNK])
            sch.parallel(_fuse(sch, [*outer, chunks]))
        elif threads:  # one loop: each thread's range of it is a plain loop
            sch.parallel(_fuse(sch, loops))

    def _parallel(self, sch, loop):
        if self.threads:
            sch.parallel(loop)

    def _vectorize(self, sch, loop):
        if self.vectors:
            sch.vectorize(loop)

    # one reduction block ---------------------------------------------------------------------------
    def _single(self, sch, block, lanes, many_rows):
        n_red = _reduce_count(sch, block)
        n_rows = len(sch.get_loops(block)) - n_red
        contiguous = _contiguous_reduction(sch, block)
        if many_rows and n_rows and not contiguous:
            return self._columns(sch, block, n_rows, lanes)
        fold = None
        if not many_rows or not n_rows:
            fold, block = block, self._cut(sch, block, n_rows)
            n_rows = len(sch.get_loops(block)) - 1
        row, rf = _rfactor_rows(sch, block, n_rows, self.accum)
        if rf is None:  # a short or odd row: rows in parallel, each summed serially
            self._parallel(sch, row)
            sch.decompose_reduction(block, sch.get_loops(block)[-1])
        else:
            sch.reverse_compute_at(block, row)  # fold each row's partials right after it
            ko, ki = sch.get_loops(rf)[-2:]
            self._vectorize(sch, ki)
            self._parallel(sch, row)
            sch.decompose_reduction(rf, ko)
        if fold is not None:  # initialised outside its loop: with no chunks at all (size 0) it is 0
            sch.decompose_reduction(fold, sch.get_loops(fold)[-1])
        return True

    def _cut(self, sch, block, n_rows):
        """Few rows: split the reduction into up to `parts` chunks of at least 2048 elements, made rows
        of their own (rfactor). An odd or symbolic size gets chunks of a fixed size, the last one
        ragged: a chunk that the predicate leaves empty would never initialise its partial result."""
        loops = sch.get_loops(block)
        k = _fuse(sch, loops[n_rows:])
        extent = get_extent(sch, k)
        want = max(1, min(self.parts, extent // 2048)) if isinstance(extent, int) else self.parts
        parts = _pow2_divisor(extent, want)
        if isinstance(extent, int) and extent and _pow2_divisor(extent // parts, 16) < 16:
            # odd chunks (200,000 in 64 chunks of 3125) are reduced one scalar at a time: fewer
            # chunks whose size is a multiple of 16 (25 of 8000) keep vectors of partial results
            even = [d for d in range(want, min(want, 8) - 1, -1) if extent % d == 0 and (extent // d) % 16 == 0]
            parts = even[0] if even else parts
        if parts >= min(want, 8):
            kp, _ = sch.split(k, [parts, None])
        else:
            kp, _ = sch.split(k, [None, 2048 if isinstance(extent, int) else 4096])
        return sch.rfactor(kp, factor_axis=0)

    def _columns(self, sch, block, n_rows, lanes):
        """Reduce over a leading or middle axis: the kept elements in parallel, vectors of contiguous ones."""
        loops = sch.get_loops(block)
        kept, red = _fuse(sch, loops[:n_rows]), _fuse(sch, loops[n_rows:])
        extent = get_extent(sch, kept)
        chunk = _pow2_divisor(extent, 4 * lanes)
        if chunk < lanes and (not isinstance(extent, int) or extent >= 8 * lanes):
            # a symbolic or odd row of many columns: chunks of 4 * lanes columns, the last ragged, each
            # reduced a row of contiguous columns at a time (LLVM vectorises that loop); a parallel
            # loop over single columns read each column with a stride of a row (13 ms for 4096x1024)
            outer, inner = sch.split(kept, [None, 4 * lanes])
            sch.reorder(outer, red, inner)
            self._parallel(sch, outer)
            sch.decompose_reduction(block, red)
            return True
        if chunk < lanes:
            self._parallel(sch, kept)
            sch.decompose_reduction(block, red)  # initialised even when nothing is reduced
            return True
        outer, inner = sch.split(kept, [None, chunk])
        sch.reorder(outer, red, inner)
        self._parallel(sch, outer)
        self._vectorize(sch, sch.split(inner, [None, lanes])[1])
        sch.decompose_reduction(block, red)
        return True

    # several blocks over the same rows ---------------------------------------------------------------
    def _rows(self, sch, blocks, reductions, lanes):
        last = blocks[-1]
        n_rows = min(len(sch.get_loops(b)) - _reduce_count(sch, b) for b in reductions)
        if n_rows < 1 or any(len(sch.get_loops(b)) - _reduce_count(sch, b) != n_rows for b in reductions):
            return False
        order, rfs = [], []
        for b in blocks[:-1]:          # 1. rfactor while each reduction still owns its loop nest
            if _reduce_count(sch, b):
                _, rf = _rfactor_rows(sch, b, n_rows, self.accum)
                if rf is not None:
                    order.append(rf)
                    rfs.append(rf)
            order.append(b)
        loops = sch.get_loops(last)    # 2. the last block's rows in parallel, its row vectorised
        def units(nest):
            return len(nest) >= n_rows and all(isinstance(e, int) and e == 1 for e in (get_extent(sch, loop) for loop in nest[:n_rows]))

        if units(sch.get_loops(reductions[0])) and not units(loops):
            # one row, whose unit axis the element-wise blocks lost to normalisation: their first loop
            # is no row (taken for one, every block ran once per element); `_passes` takes it
            return False
        row = _fuse(sch, loops[:n_rows])
        inner = loops[n_rows:]
        if inner:
            j = _fuse(sch, inner)
            vector = _pow2_divisor(get_extent(sch, j), lanes)
            if vector > 1:
                self._vectorize(sch, sch.split(j, [None, vector])[1])
        self._parallel(sch, row)
        for b in reversed(order):      # 3. every other block per row, consumers first
            sch.compute_at(b, row, preserve_unit_loops=True)
        for rf in rfs:                 # 4. the partial-result axis innermost, one vector register wide
            ki, ko = _rfactor_loops(sch, rf)
            under = sch.get_loops(rf)[1:]  # below the row: ki, ko and unit loops of the other axes
            sch.reorder(*[loop for loop in under if not sch.get(loop).same_as(sch.get(ki))
                          and not sch.get(loop).same_as(sch.get(ko))], ko, ki)
            self._vectorize(sch, ki)
        for b in blocks[:-1]:          # 5. element-wise blocks that could not be inlined
            if not _reduce_count(sch, b) and len(sch.get_loops(b)) > 1:
                loop = sch.get_loops(b)[-1]
                vector = _pow2_divisor(get_extent(sch, loop), lanes)
                if vector > 1:
                    self._vectorize(sch, sch.split(loop, [None, vector])[1])
        for rf in rfs:                 # 6. last: the partials' initialisation apart from their update
            sch.decompose_reduction(rf, sch.get_loops(rf)[-2])
        return True


def _math_read_twice(sch, block) -> bool:
    """An element-wise block that calls math (exp, log, tanh, ...) and that two blocks read, such as
    a softmax's exp(x - max), read by the row's sum and by the division: kept as a buffer per row (in
    cache) rather than inlined into both, where every element's exp would be computed twice. On one
    thread of the 16-core Xeon a 1024x4096 softmax took 6.6 ms that way, a log-softmax (one exp) 4.0 ms;
    on one Zen 5 core the softmax went from 2.07 to 1.87 ms."""
    value = _block_value(sch, block)
    return value is not None and not _reduce_count(sch, block) and len(sch.get_consumers(block)) >= 2 \
        and _calls_long_math(value)


def _kept_in_order(infos, remaining, kept) -> list:
    """The blocks of `infos` that `_inline(..., keep=kept)` left (`remaining`) or kept, in order."""
    return [info.block_rv for info in infos if any(info is other for other in [*remaining, *kept])]


class CPUMatmul(CPURule):
    """C[b.., i, j] += A[b.., i, k] * B[b.., k, j] with j contiguous in B: a register-tiled micro-kernel.
    Each (i, j) tile of mr x nr results accumulates in registers over the whole k loop ("local"
    cache_write), nr as nr/lanes vectors, i unrolled; tiles walk nb-wide column panels (B stays in
    cache) and the panels x row tiles run in parallel. Element-wise prologues are inlined and
    epilogues (bias, relu, a cast) folded into the tile's write-back, so the product stays one fused
    kernel. The tile must fit the vector registers: 8x32 float32 = 16 zmm with AVX-512, 6x16 = 12 ymm
    with AVX2 (the AVX-512 tile compiled for AVX2 spills and ran 1.6-2.6x slower). Any number of
    batch axes; A may be read transposed (A[k, i]: the tile broadcasts one A element per row, either
    layout serves); a B read as B[j, k] is first packed, in parallel, into a [k, j] buffer
    (cache_read + transform_layout): vectors over j need j contiguous. A size that is no whole number
    of tiles (odd, symbolic) is computed on operands zero-padded to whole tiles (pad_einsum)."""

    AVX512 = (8, 32, 128, 16)  # mr, nr, nb, lanes
    AVX2 = (6, 16, 128, 8)

    def schedule(self, sch, infos, target):
        mains = [info for info in infos if not info.is_injective()]
        if len(mains) != 1 or not re.fullmatch("SS+R", mains[0].dom_kind()):
            return False
        block = mains[0].block_rv
        rest = _inline(sch, [info for info in infos if info.block_rv != block])  # prologues go here
        transposed_b = _matmul_operands(sch.get(block))  # after inlining: the layouts actually read
        if transposed_b is None:
            return False
        avx512 = tvm.target.codegen.target_has_features("avx512f", target)
        mr, nr, nb, lanes = self.AVX512 if avx512 else self.AVX2
        if tvm.DataType(sch.get(block).writes[0].source.dtype).bits != 32:
            return False
        if transposed_b is not False:
            self._pack(sch, block, transposed_b)
        *batch, i, j, k = sch.get_loops(block)
        rows, cols = get_extent(sch, i), get_extent(sch, j)
        out = None
        if not (isinstance(rows, int) and rows % mr == 0 and isinstance(cols, int) and cols % nr == 0):
            # a ragged tile predicates each lane, and TVM then scalarises the whole micro-kernel
            # (30x slower at 1000x1000): compute on operands zero-padded to whole tiles instead
            sch.pad_einsum(block, [1] * len(batch) + [mr, nr, 1])
            copy_lanes = _vector_lanes(sch, target) if _vectorizable(sch) else 1
            for producer in sch.get_producers(block):
                self._spread(sch, producer, copy_lanes)
            out = sch.get_consumers(block)[0]       # copies the padded result's valid part back
            *batch, i, j, k = sch.get_loops(block)
        jt, j1 = sch.split(j, [None, nr])  # whole nr-wide tiles (a ragged panel only skips tiles)
        jb, j0 = sch.split(jt, [None, nb // nr])
        i0, i1 = sch.split(i, [None, mr])
        sch.reorder(*batch, jb, i0, j0, k, i1, j1)
        tile = sch.cache_write(block, 0, "local")   # the block now accumulates into a register tile
        sch.reverse_compute_at(tile, j0)             # written back once its k loop is done
        for epilogue in rest:  # epilogues read C: fold them into the write-back, while C has one reader
            consumers = sch.get_consumers(out if out is not None else tile)  # (TVM would inline one
            if len(consumers) != 1 or not sch.get(consumers[0]).same_as(sch.get(epilogue.block_rv)):
                break                                  # of two readers and drop C's write)
            sch.reverse_compute_inline(epilogue.block_rv)
        if out is not None:
            self._spread(sch, out, copy_lanes)
        sch.vectorize(sch.split(sch.get_loops(tile)[-1], [None, lanes])[1])
        sch.unroll(i1)
        j1o, j1i = sch.split(j1, [None, lanes])
        sch.unroll(j1o)
        sch.vectorize(j1i)
        work = _static_product(sch, sch.get_loops(block))
        if work is None or work >= MIN_PARALLEL:  # a launch costs more than a small product
            sch.parallel(sch.fuse(*batch, jb, i0))
        sch.decompose_reduction(block, k)
        return True

    @staticmethod
    def _spread(sch, block, lanes: int):
        """An element-wise copy around the product (padding, the padded result's write-back): its
        loops fused, in parallel, the innermost `lanes` vectorised where the size allows."""
        loops = sch.get_loops(block)
        fused = _fuse(sch, loops)
        extent = get_extent(sch, fused)
        vector = _pow2_divisor(extent, lanes)
        if vector > 1:
            fused, inner = sch.split(fused, [None, vector])
            sch.vectorize(inner)
        if not isinstance(extent, int) or extent >= MIN_PARALLEL:
            sch.parallel(fused)

    @staticmethod
    def _pack(sch, block, read: int):
        """B read as B[.., j, k]: copy it once into a [.., k, j] buffer (its last two axes swapped),
        the copy's rows in parallel (contiguous reads along k), before the product reads it."""
        ndim = len(sch.get(block).reads[read].region)
        packed = sch.cache_read(block, read, "global")
        sch.transform_layout(packed, ("write", 0),
                             tirx.IndexMap.from_func(lambda *x: (*x[:-2], x[-1], x[-2]), ndim=ndim))
        loops = sch.get_loops(packed)
        work = _static_product(sch, loops)
        if len(loops) > 1 and (work is None or work >= MIN_PARALLEL):
            sch.parallel(_fuse(sch, loops[:-1]))


class CPUSpatial(CPURule):
    """The last CPU rule, for any kernel the others decline (a half argmax, a float64 product): each
    block's leading spatial loops fused and in parallel, and an element-wise block's innermost loop
    vectorised where its accesses are contiguous, so that no kernel runs its work on one thread."""

    def schedule(self, sch, infos, target):
        lanes = _vector_lanes(sch, target) if _vectorizable(sch) else 1
        spread = False
        for info in infos:
            kinds = info.dom_kind()
            n_spatial = len(kinds) - len(kinds.lstrip("S"))
            loops = sch.get_loops(info.block_rv)
            if not n_spatial or len(loops) != len(kinds):
                continue
            work = _static_product(sch, loops)
            if work is not None and work < MIN_PARALLEL:
                continue
            if n_spatial == len(loops) and n_spatial > 1 and lanes > 1 and _contiguous_lanes(sch, loops[-1], lanes):
                sch.vectorize(sch.split(loops[-1], [None, lanes])[1])
                loops = loops[:-1]
                n_spatial -= 1
            sch.parallel(_fuse(sch, loops[:n_spatial]))
            spread = True
        return spread


def _matmul_operands(block):
    """Two reads indexed by plain variables, A by i and k (either order) and B by k and j: False when
    B is read with j last (the layout the tile vectorises), B's read index when it is read with k
    last (B[.., j, k], to be packed), None for anything else."""
    i, j, k = [iv.var for iv in block.iter_vars][-3:]
    if len(block.reads) != 2 or len(block.writes) != 1:
        return None
    indices = [[r.min for r in read.region] for read in block.reads]
    if not all(isinstance(e, tirx.Var) for index in indices for e in index):
        return None
    used = [{e.name for e in index} for index in indices]
    a, b = (0, 1) if j.name not in used[0] else (1, 0)
    if not (i.name in used[a] and k.name in used[a] and j.name not in used[a]
            and k.name in used[b] and i.name not in used[b] and j.name in used[b]):
        return None
    if indices[b][-1].same_as(j):
        return False
    if len(indices[b]) >= 2 and indices[b][-1].same_as(k) and indices[b][-2].same_as(j):
        return b
    return None


def _rfactor_rows(sch, block, n_rows, accum):
    """A reduction block of loops [rows..., reduced...] as (row loop, rfactor block): the reduced loop
    split by up to `accum` partial results (a power of two dividing it), which the original block then
    folds. (row loop, None) when the row is too short or odd for at least 4 partials."""
    loops = sch.get_loops(block)
    row = _fuse(sch, loops[:n_rows])
    k = _fuse(sch, loops[n_rows:])
    extent = get_extent(sch, k)
    # at least 16 steps a row: each row ends folding its partials one by one, which for short rows
    # cost more than the steps saved (a 32x256 softmax on one Zen 5 core: 5.4 us with 64 partials,
    # 4.5 with 16)
    vector = _pow2_divisor(extent, min(accum, max(extent // 16, 4)) if isinstance(extent, int) else accum)
    if vector < 4:
        return row, None
    sch.split(k, [None, vector])
    rf = sch.rfactor(sch.get_loops(block)[-1], factor_axis=-1)
    return sch.get_loops(rf)[0], rf


def _rfactor_loops(sch, rf):
    """(ki, ko) of an rfactor block after `compute_at`: the loop of its partial-result axis (the
    last index of the buffer it writes) and its reduction loop. Found by the block's bindings: with
    rows of several axes (a 4-D causal softmax) the unit loops of the other axes sit between them."""
    loops = sch.get_loops(rf)
    realize = sch.get(loops[-1]).body
    block = realize.block
    partial = block.writes[0].region[-1].min

    def loop_of(value):
        used = tirx.analysis.undefined_vars(value)
        return next(loop for loop in reversed(loops) if any(sch.get(loop).loop_var.same_as(v) for v in used))

    ki = loop_of(next(value for iv, value in zip(block.iter_vars, realize.iter_values) if iv.var.same_as(partial)))
    ko = loop_of(next(value for iv, value in zip(block.iter_vars, realize.iter_values)
                      if iv.iter_type == tirx.IterVar.CommReduce))
    return ki, ko


# --------------------------------------------------------------------------------------------------
# a vectorisable float32 exp for CPU builds
# --------------------------------------------------------------------------------------------------
# LLVM has no vector exp here: it turns a vectorised exp into one libm expf call per lane, which
# caps every exp, sigmoid and softmax at scalar speed. While babytriton builds (`fast_exp`), the llvm
# lowering of float32 exp is Cody-Waite range reduction and the Cephes degree-6 polynomial (about
# 1 ulp), with inf, 0 and NaN where libm gives them. The lowering is global to TVM, hence the flag.
_EXP_LOWERING = tvm.ir.Op.get("tirx.exp").get_attr("llvm.FLowerIntrinsic")
_fast = threading.local()


def _exp_f32(arg, lanes: int):
    x = tirx.Var("x", arg.ty.dtype if hasattr(arg, "ty") else arg.dtype)  # named once: exp(exp(..)) stays linear
    return tirx.Let(x, _bool_casts_as_selects(arg), _exp_f32_of(x, lanes))


def _bool_casts_as_selects(expr, scalar_too: bool = False):
    """`expr` with each cast of a bool vector (`scalar_too`: of any bool) written as a select of 1 or
    0 (the same values): the LLVM codegen analyses a Let's value, and TVM's interval analysis fails on
    a bool vector's cast (it makes a vector IntImm), as in exp(x.astype('float32')) for a vectorised
    bool x, or `where`'s `0 < int64(cond)` once its loop is vectorised."""
    def as_select(cast):
        source = cast.value.ty.dtype if hasattr(cast.value, "ty") else cast.value.dtype
        if not source.is_bool or (source.lanes == 1 and not scalar_too):
            return cast
        dtype = cast.ty.dtype if hasattr(cast, "ty") else cast.dtype
        scalar = str(dtype.with_lanes(1))
        if source.lanes == 1:
            return tirx.Select(cast.value, tirx.const(1, scalar), tirx.const(0, scalar))
        return tirx.Select(cast.value, tirx.Broadcast(tirx.const(1, scalar), source.lanes),
                           tirx.Broadcast(tirx.const(0, scalar), source.lanes))
    return tvm_ffi.structural_map(expr, (tirx.Cast, as_select))


def _exp_f32_of(x, lanes: int):
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    i32 = lambda v: tirx.const(v, "int32")  # noqa: E731
    fdt, idt = ("float32", "int32") if lanes == 1 else (f"float32x{lanes}", f"int32x{lanes}")
    # clamped where the result has overflowed (e^89: inf) or underflowed (e^-104: 0) already, so
    # the same arithmetic gives inf and 0 beyond, as libm does, with no select per bound
    c = tirx.max(tirx.min(x, f32(89.0)), f32(-104.0))
    n = tirx.floor(c * f32(1.4426950408889634) + f32(0.5))            # x = n ln2 + r
    r = c - n * f32(0.693359375) - n * f32(-2.12194440e-4)             # ln2 as hi + lo
    p = f32(1.9875691500e-4)
    for coefficient in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f32(coefficient)
    p = p * r * r + r + f32(1.0)                                        # e^r
    # 2^n as two normal halves: n reaches 128 (e^89) and -150 (subnormal results)
    half = n.astype(idt) // i32(2)
    low = tirx.reinterpret(fdt, (half + i32(127)) * i32(1 << 23))
    high = tirx.reinterpret(fdt, (n.astype(idt) - half + i32(127)) * i32(1 << 23))
    return tirx.Select(tirx.isnan(x), x, p * low * high)  # NaN stays NaN (the clamp made it a number)


def _as_f32(dtype):
    """float32 with the lanes of `dtype`."""
    return "float32" if dtype.lanes == 1 else f"float32x{dtype.lanes}"


def _in_float32(fast, tvms):
    """The llvm lowering of a float math call: `fast(arg, lanes)` for float32 while babytriton builds
    (`fast_exp`); float16 computed in float32 by it and rounded once, as torch does (LLVM scalarises a
    float16 vector call); TVM's own lowering `tvms` otherwise."""
    def lower(call):
        dtype = call.ty.dtype
        if getattr(_fast, "on", False) and dtype.is_float and dtype.bits == 32:
            return fast(call.args[0], dtype.lanes)
        if getattr(_fast, "on", False) and str(dtype.with_lanes(1)) == "float16":
            return tirx.Cast(dtype, fast(tirx.Cast(_as_f32(dtype), call.args[0]), dtype.lanes))
        return tvms(call)
    return lower


def _rational(c, numerator, denominator):
    """Eigen's odd rational form c * p(c^2) / q(c^2), each polynomial by Horner's rule in float32."""
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    c2 = c * c
    p, q = f32(numerator[0]), f32(denominator[0])
    for coefficient in numerator[1:]:
        p = p * c2 + f32(coefficient)
    for coefficient in denominator[1:]:
        q = q * c2 + f32(coefficient)
    return c * p / q


tirx.op.register_intrin_lowering("tirx.exp", target="llvm", f=_in_float32(_exp_f32, _EXP_LOWERING), level=99)

# erf the same way: LLVM calls libm's erff once per lane of a vectorised erf (gelu's), so float32 erf
# is Eigen's rational approximation (the one of TVM's `topi.fast_erf`): odd degree 13 over even
# degree 8 on x clamped to [-4, 4] (erf is +-1 in float32 beyond), within 7 ulp (4e-7) of torch.erf.
_ERF_LOWERING = tvm.ir.Op.get("tirx.erf").get_attr("default.FLowerIntrinsic")
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                  -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                    -7.37332916720468e-03, -1.42647390514189e-02)


def _erf_f32(arg, _lanes=None):
    x = tirx.Var("x", arg.ty.dtype)  # named once (the polynomial reads it several times)
    c = tirx.max(tirx.min(x, tirx.const(4.0, "float32")), tirx.const(-4.0, "float32"))
    # it overshoots +-1 by up to 2 ulp from |x| = 3.8 on: GELU's 1 + erf(x / sqrt 2) went below 0, and
    # GELU itself above 0, for x near -5.6
    ratio = tirx.max(tirx.min(_rational(c, _ERF_NUMERATOR, _ERF_DENOMINATOR), tirx.const(1.0, "float32")),
                     tirx.const(-1.0, "float32"))
    return tirx.Let(x, _bool_casts_as_selects(arg), tirx.Select(tirx.isnan(x), x, ratio))


tirx.op.register_intrin_lowering("tirx.erf", target="llvm", f=_in_float32(_erf_f32, _ERF_LOWERING), level=99)


# tanh the same way: TVM's llvm lowering computes both exp(2x) and exp(-2x) and divides twice (an
# arm for each sign; GELU-tanh ran 3.5x slower than GELU-erf). Float32 tanh here is Eigen's
# rational approximation (TVM's `topi.fast_tanh`): odd degree 13 over even degree 6 of x clamped to
# [-9, 9], exactly +-1 from |x| = 8.04 (torch: 9.01), within 5 float32 ulp of 1 below that (an exp form
# 1 - 2 / (exp(2|x|) + 1) is within 1 ulp there but doubled GELU-tanh's time); x itself below 4e-4.
_TANH_LOWERING = tvm.ir.Op.get("tirx.tanh").get_attr("llvm.FLowerIntrinsic")
_TANH_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                   1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
TANH_CLAMP = 9.0


def _tanh_f32(arg, _lanes=None):
    x = tirx.Var("x", arg.ty.dtype)  # named once (the polynomial reads it several times)
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    c = tirx.max(tirx.min(x, f32(TANH_CLAMP)), f32(-TANH_CLAMP))
    keep = tirx.Or(tirx.abs(x) < f32(0.0004), tirx.isnan(x))  # tanh(x) rounds to x; NaN stays NaN
    # it overshoots 1 by an ulp near 8.5
    ratio = tirx.max(tirx.min(_rational(c, _TANH_NUMERATOR, _TANH_DENOMINATOR), f32(1.0)), f32(-1.0))
    return tirx.Let(x, _bool_casts_as_selects(arg), tirx.Select(keep, x, ratio))


def _tanh_lowering(call):
    """float64 tanh is LLVM's own intrinsic (libm's tanh per lane): TVM's lowering, an exp formula,
    cancelled near 0 (tanh(1e-12) was 9.99978e-13, tanh(1e-20) 0, tanh(-0.0) +0)."""
    if str(call.ty.dtype.with_lanes(1)) == "float64":
        return tirx.call_llvm_pure_intrin(call.ty.dtype, "llvm.tanh", call.args[0])
    return _in_float32(_tanh_f32, _TANH_LOWERING)(call)


tirx.op.register_intrin_lowering("tirx.tanh", target="llvm", f=_tanh_lowering, level=99)


class fast_exp:  # noqa: N801 - used as `with schedules.fast_exp():`
    """While active on this thread, LLVM builds lower float32 exp, erf and tanh to the vectorisable polynomials."""

    def __enter__(self):
        self.before = getattr(_fast, "on", False)
        _fast.on = True

    def __exit__(self, *exc):
        _fast.on = self.before


# --------------------------------------------------------------------------------------------------
# the check after scheduling: no large kernel left on one thread
# --------------------------------------------------------------------------------------------------

SERIAL_LIMIT = 10 ** 5  # loop iterations on one thread (one GPU block) that earn a warning
SYMBOLIC_GUESS = 4096   # what a symbolic size counts for in that estimate
# and a tensor of several symbolic axes counts at most SYMBOLIC_GUESS ** 2 elements: each of the
# three sizes of an (a, b, c) tensor counts 256, else a full sum's fold of its chunks of 4096 (a*b*c /
# 4096 partial sums, in fact 33 for an (8, 4096, 33) input) counted 16,777,216 serial iterations
SYMBOLIC_AXES = 2


class SerialKernelWarning(UserWarning):
    """A compiled kernel runs a large amount of work on one CPU thread or in one GPU block: no
    schedule rule spread it, so it is likely many times slower than it could be."""


def serial_work(func: tirx.PrimFunc, gpu: bool) -> int:
    """Loop iterations of `func` outside any loop that spreads them: a parallel loop on a CPU, a
    blockIdx loop on a GPU (either of extent > 1). A symbolic size counts as SYMBOLIC_GUESS, a
    tensor's several symbolic sizes together as at most SYMBOLIC_GUESS ** SYMBOLIC_AXES (`_guesses`)."""
    total = 0
    guesses = _guesses(func)

    def spreads(loop) -> bool:
        extent = loop.extent
        wide = not isinstance(extent, tirx.IntImm) or int(extent) > 1
        if gpu:
            return wide and loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None \
                and loop.thread_binding.thread_tag.startswith("blockIdx")
        return wide and loop.kind == tirx.ForKind.PARALLEL

    def extent_of(loop) -> int:
        try:
            return max(_estimate(loop.extent, guesses), 0)
        except (TypeError, ZeroDivisionError):
            return SYMBOLIC_GUESS

    def visit(stmt, iterations: int):
        nonlocal total
        if isinstance(stmt, tirx.For):
            if spreads(stmt):
                return
            visit(stmt.body, iterations * extent_of(stmt))
        elif isinstance(stmt, tirx.SeqStmt):
            for part in stmt.seq:
                visit(part, iterations)
        elif isinstance(stmt, s_tir.SBlockRealize):
            visit(stmt.block, iterations)
        elif isinstance(stmt, s_tir.SBlock):
            if stmt.init is not None:
                visit(stmt.init, iterations)
            before = total
            visit(stmt.body, iterations)
            if total == before:  # a leaf block: one iteration of its body per enclosing iteration
                total += iterations
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, iterations)
            if stmt.else_case is not None:
                visit(stmt.else_case, iterations)
        elif hasattr(stmt, "body"):  # LetStmt, AttrStmt, DeclBuffer, ...
            visit(stmt.body, iterations)

    visit(func.body, 1)
    return total


_ARITH = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
          tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b, tirx.Min: min, tirx.Max: max}


def _guesses(func: tirx.PrimFunc) -> dict[str, int]:
    """Each size variable's guess: SYMBOLIC_GUESS, less where a parameter has more than SYMBOLIC_AXES
    symbolic axes, so that their product is SYMBOLIC_GUESS ** SYMBOLIC_AXES (the smallest guess over
    the parameters that use the variable)."""
    guesses: dict[str, int] = {}
    for param in func.params:
        shape = getattr(getattr(param, "ty", None), "shape", None) if _is_buffer(param) else None
        names = {v.name for dim in (shape or ()) for v in tirx.analysis.undefined_vars(dim)}
        if len(names) > SYMBOLIC_AXES:
            guess = max(round(SYMBOLIC_GUESS ** (SYMBOLIC_AXES / len(names))), 1)
            for name in names:
                guesses[name] = min(guesses.get(name, SYMBOLIC_GUESS), guess)
    return guesses


def _estimate(expr, guesses: dict[str, int] | None = None) -> int:
    """An integer expression's value with every size variable at its guess (`_guesses`; SYMBOLIC_GUESS
    when it has none). TypeError if odd."""
    if isinstance(expr, tirx.IntImm):
        return int(expr)
    if isinstance(expr, tirx.Var):
        return (guesses or {}).get(expr.name, SYMBOLIC_GUESS)
    if isinstance(expr, tirx.Cast):
        return _estimate(expr.value, guesses)
    for kind, fn in _ARITH.items():
        if isinstance(expr, kind):
            return fn(_estimate(expr.a, guesses), _estimate(expr.b, guesses))
    raise TypeError(type(expr).__name__)


def launch_shape(func: tirx.PrimFunc, gpu: bool) -> str:
    """How a scheduled kernel runs: "grid G x block B" on a GPU (blocks and threads per block, each
    a tuple where several axes are bound), "parallel P x vector V" on a CPU ("serial" when no loop
    is parallel or vectorised). Symbolic extents are shown as expressions of the sizes."""
    bound: dict[str, list] = {}
    parallel, vector = [], []
    for loop in _all(func.body, tirx.For):
        if loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None:
            bound.setdefault(loop.thread_binding.thread_tag, []).append(loop.extent)
        elif loop.kind == tirx.ForKind.PARALLEL:
            parallel.append(loop.extent)
        elif loop.kind == tirx.ForKind.VECTORIZED:
            vector.append(loop.extent)

    def largest(extents):
        static = [int(e) for e in extents if isinstance(e, tirx.IntImm)]
        symbolic = list(dict.fromkeys(str(e) for e in extents if not isinstance(e, tirx.IntImm)))
        return symbolic[0] if symbolic else str(max(static))

    def dims(prefix):
        shown = [largest(bound[f"{prefix}.{axis}"]) for axis in "xyz" if f"{prefix}.{axis}" in bound]
        return "1" if not shown else shown[0] if len(shown) == 1 else f"({', '.join(shown)})"

    if gpu:
        return f"grid {dims('blockIdx')} x block {dims('threadIdx')}"
    shape = []
    if parallel:
        shape.append(f"parallel {largest(parallel)}")
    if vector:
        shape.append(f"vector {largest(vector)}")
    return " x ".join(shape) or "serial"


def schedule_summary(mod: tvm.IRModule, target: tvm.target.Target) -> dict[str, tuple[str, str]]:
    """kernel name -> (the rule that scheduled it, its launch shape), for `k.fusion`."""
    out = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        attrs = func.attrs if func.attrs is not None else {}
        rule = str(attrs[RULE_ATTR]) if RULE_ATTR in attrs else \
            "tuned (MetaSchedule)" if "tirx.is_scheduled" in attrs else "none"
        out[gvar.name_hint] = (rule, launch_shape(func, own_target(func, target).kind.name == "cuda"))
    return out


def serial_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> list[tuple[str, int]]:
    """(kernel name, serial iterations) of each kernel over SERIAL_LIMIT, in name order."""
    found = []
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        work = serial_work(func, own_target(func, target).kind.name == "cuda")
        if work > SERIAL_LIMIT:
            found.append((gvar.name_hint, work))
    return sorted(found)


def gpu_rules(schedule: str) -> list:
    if schedule == "fallback":  # the 2024 tutorial: one thread per element, nothing else
        return [Guarded(dl.gpu.Fallback(), guard=False)]
    return [Guarded(r) for r in (dl.gpu.Matmul(), dl.gpu.GEMV(), SplitReduction(), RowReduction(), RowKernel(),
                                 dl.gpu.Reduction(), LongRows(dl.gpu.GeneralReduction()), Elementwise())] + \
        [Guarded(dl.gpu.Fallback(), guard=False)]


def cpu_rules(schedule: str = "dlight") -> list:
    dlight = [dl.cpu.GEMV(), dl.cpu.Reduction()]  # all that Dlight has for CPUs
    if schedule == "fallback":
        return [Guarded(r) for r in dlight]
    # Dlight's Reduction once took 84 s of LLVM on a float16 softmax (scalarised <N x half> math):
    # such kernels now go to CPUReduction, and half arithmetic is float32 (half_math_in_float32)
    return [Guarded(r) for r in (CPUMatmul(), CPUElementwise(), CPUReduction(), dl.cpu.GEMV(), dl.cpu.Reduction(),
                                 CPUSpatial())]


# --------------------------------------------------------------------------------------------------
# Parallel loops as GPU kernels: backend="tir" functions, and kernels no GPU rule scheduled
# --------------------------------------------------------------------------------------------------

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
        if any(loop.kind == tirx.ForKind.THREAD_BINDING for loop in _all(func.body, tirx.For)) or \
                not _all(func.body, tirx.For) and not _all(func.body, tirx.BufferStore):
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
    analyzer = tvm.sym.Analyzer()
    sizes = {dim for param in func.params if isinstance(param.ty, tirx.BufferType)
             for dim in param.ty.shape if isinstance(dim, tirx.Var)}
    for size in sizes:  # tensor sizes are never negative: lets max(n, 0) simplify to n
        analyzer.bind(size, tvm.ir.Range(tirx.IntImm(size.ty.dtype, 0), tirx.IntImm(size.ty.dtype, 1 << 62)))
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



def apply(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int) -> tvm.IRModule:
    """Schedule every TIR function of a fused module for `target`."""
    gpu = target.kind.name == "cuda"
    mod = _empty_kernels_done(mod)
    if schedule == "meta_schedule":
        mod = meta_schedule(mod, target, trials)
    with target:
        # Dlight skips functions already scheduled (tuned ones); on a GPU everything left needs threads.
        rules = gpu_rules("fallback" if schedule == "meta_schedule" else schedule) if gpu else cpu_rules(schedule)
        mod = dl.ApplyDefaultSchedule(*rules)(mod)
    return launch_unscheduled(mod) if gpu else mod


def _empty_kernels_done(mod: tvm.IRModule) -> tvm.IRModule:
    """Kernels whose results all have a static size 0 lose their body before any rule sees them
    (Dlight's GPU rules divided by the zero extent: a static (3, 0) softmax failed to compile)."""
    def done(func):
        emptied = _skip_if_empty(func, None)   # None: only static sizes of 0 are decided here
        return func if emptied.same_as(func) else \
            emptied.with_attrs({"tirx.is_scheduled": True, RULE_ATTR: "none (no elements)"})
    return updated(mod, tirx.PrimFunc, done)


def updated(mod: tvm.IRModule, kind, update) -> tvm.IRModule:
    """`mod` with `update(func)` in place of each function of `kind` that it changes: copied on the
    first change (a recorded stage's module is never changed), `mod` itself if nothing changes."""
    out = mod
    for gvar, func in mod.functions_items():
        if isinstance(func, kind):
            new = update(func)
            if not new.same_as(func):
                out = out if out is not mod else mod.clone()
                out[gvar] = new
    return out


def own_target(func: tirx.PrimFunc, target: tvm.target.Target | None) -> tvm.target.Target | None:
    """The target a kernel carries (in a module with device blocks), else the module's."""
    return func.attrs["target"] if func.attrs is not None and "target" in func.attrs else target


def init_outside_reductions(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every reduction left with its init inside its reduction loops a separate init loop nest.
    TVM lowers such an init to "on the first reduction step", which never comes when a reduced size is
    0 at run time (a symbolic n = 0): the result would be uninitialised memory instead of the sum's 0,
    the product's 1, a matrix product's zeros. Reductions whose loops are bound to GPU threads are
    left to TVM's cross-thread lowering, which starts every thread from the identity."""
    def decomposed(func):
        sch = s_tir.Schedule(func)
        for realize in _reductions_with_init(func):
            block = sch.get_sblock(realize.block.name_hint)
            loop = _outermost_reduction_loop(sch, block, realize)
            if loop is not None:
                try:
                    sch.decompose_reduction(block, loop)
                except s_tir.ScheduleError:  # a layout it cannot split (left as scheduled)
                    continue
        return sch.mod["main"]
    return updated(mod, tirx.PrimFunc, decomposed)


def skip_empty_outputs(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """Run no kernel whose outputs are all empty (a size 0): there is nothing to write, and schedules
    that assume a size of at least 1 read and write out of bounds (on the GPU, `x * 2` of a (0, 4)
    tensor was an illegal memory access). A statically empty kernel loses its body; on the CPU, a
    symbolic size guards the body at run time. (On the GPU such a guard would enclose the kernel's
    thread syncs, which TVM refuses: a GPU call with an empty symbolic-size tensor runs eagerly instead,
    jit._eager_when_empty.) Kernels with a
    non-empty output still run, so a reduction over an empty axis writes its init."""
    return updated(mod, tirx.PrimFunc, lambda func: _skip_if_empty(func, target))


def _skip_if_empty(func: tirx.PrimFunc, target: tvm.target.Target | None) -> tirx.PrimFunc:
    conditions = [_nonempty(buffer) for buffer in _written_params(func)]
    if not conditions or any(c is True for c in conditions):
        return func
    conditions = [c for c in conditions if c is not False]
    own = own_target(func, target)
    if conditions and (own is None or own.kind.name != "llvm"):
        return func
    if conditions:
        guard = functools.reduce(tirx.Or, conditions)
        body = lambda stmt: tirx.IfThenElse(guard, stmt, None)  # noqa: E731
    else:
        body = lambda stmt: tirx.Evaluate(0)  # noqa: E731
    root = func.body
    if isinstance(root, s_tir.SBlockRealize):  # the guard goes inside the root block
        block = root.block
        new_block = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint,
                                 body(block.body), block.init,
                                 block.alloc_buffers if conditions else [], block.match_buffers,
                                 block.annotations)
        root = s_tir.SBlockRealize(root.iter_values, root.predicate, new_block)
    else:
        root = body(root)
    return func.with_body(root)


def _nonempty(buffer):
    """Whether a buffer has elements: True, False, or a run-time condition on its symbolic sizes."""
    sizes = [d for d in buffer.shape if not isinstance(d, tirx.IntImm)]
    if any(isinstance(d, tirx.IntImm) and int(d) == 0 for d in buffer.shape):
        return False
    return functools.reduce(tirx.And, [d > 0 for d in sizes]) if sizes else True


def _written_params(func) -> list:
    written = [region.source for realize in _all(func.body, s_tir.SBlockRealize) for region in realize.block.writes]
    written += [store.buffer for store in _all(func.body, tirx.BufferStore)]
    return [p for p in func.params if tirx.is_buffer_var(p) and any(p.same_as(w) for w in written)]


def _all(node, kind) -> list:
    found = []
    tvm_ffi.structural_walk(node, (kind, found.append))
    return found


def _reductions_with_init(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlockRealize, found.append))
    return [r for r in found if r.block.init is not None]


def _outermost_reduction_loop(sch, block, realize):
    """The outermost loop that steps a reduction variable of the block (None: there is none, or the
    reduction runs across GPU threads)."""
    reduced = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.iter_type == tirx.IterVar.CommReduce:
            reduced |= {v for v in tirx.analysis.undefined_vars(value)}
    loops = [sch.get(rv) for rv in sch.get_loops(block)]
    steps = [i for i, loop in enumerate(loops) if any(loop.loop_var.same_as(v) for v in reduced)]
    if not steps or any(loops[i].thread_binding is not None for i in steps):
        return None
    bound = [i for i, loop in enumerate(loops) if loop.thread_binding is not None]
    if bound and bound[0] > steps[0]:  # the init would leave the kernel for the host
        return None
    return sch.get_loops(block)[steps[0]]


def bool_buffers_as_bytes(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """Store the bool intermediate buffers of CPU kernels as int8 (a cast at each store and load).
    TVM's StorageRewrite retypes a buffer that vectorised loops access whole vectors of into one of
    vector elements, and for bool it makes int8 lanes that its loads then use as bools: `a & b` of a
    vectorised bool intermediate failed LLVM's verifier ("and <2 x i1>, <2 x i8>")."""
    def on_cpu(func):
        own = own_target(func, target)
        if own is None or own.kind.name != "llvm":
            return func
        return _bool_buffers_as_bytes(func.with_body(_bool_casts_as_selects(func.body, scalar_too=True)))
    return updated(mod, tirx.PrimFunc, on_cpu)


_HALF_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
_HALF_COMPARE = (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE)


def half_math_in_float32(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """Compute each float16 `+ - * / min max` and comparison of CPU kernels in float32, the result
    rounded back to float16: the same values (float32 holds every float16 result exactly before its
    one rounding), but x86 without AVX512-FP16 has no half vector arithmetic, and LLVM split a
    `<64 x half>` compare or subtract into scalar conversions (a float16 softmax ran 3x slower than
    its bfloat16 twin, which TVM already computes in float32); explicit casts are vector conversions.
    On a GPU only float16 and bfloat16 division: CUDA's is a correctly rounded software routine, and
    torch's kernels divide in float32 too (a 4096-wide float16 softmax on the H100: 36.9 -> 33.1 us)."""
    def widened(func):
        own = own_target(func, target)
        if own is None:
            return func
        if own.kind.name == "cuda":   # CUDA's half division is a correctly rounded software routine
            body = _half_calls_in_float32(func.body)
            return func.with_body(_half_math_in_float32(body, (tirx.Div,), (), ("float16", "bfloat16")))
        if own.kind.name != "llvm":
            return func
        return func.with_body(_bfloat16_casts_rounded(_half_math_in_float32(func.body)))
    return updated(mod, tirx.PrimFunc, widened)


# the math functions CUDA has a float16 and bfloat16 form of (cuda_fp16.h, cuda_bf16.h: `hexp`...),
# or TVM's CUDA prelude defines (`hpow`, `htan`, `hatan`, `herf`), by their TIR op names
_CUDA_HALF_CALLS = {"exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tan", "atan",
                    "tanh", "erf", "pow", "floor", "ceil", "trunc", "fabs"}


def _half_calls_in_float32(body):
    """Each math call on float16/bfloat16 that CUDA has no half form of, computed in float32 and
    rounded back (torch computes half math in float32 too): TVM names it `h` + its name, and nvcc
    rejected `hnearbyint` (`round(x / s)` of halves), `hcosh`, `hsinh` of bfloat16."""
    def dtype_of(expr):
        return expr.ty.dtype if hasattr(expr, "ty") else expr.dtype

    def is_half(expr) -> bool:
        return str(dtype_of(expr).with_lanes(1)) in ("float16", "bfloat16")

    def widen(call):
        name = call.op.name.rsplit(".", 1)[-1] if isinstance(call.op, tvm.ir.Op) else None
        if name is None or not call.op.name.startswith("tirx.") or name in _CUDA_HALF_CALLS or not is_half(call) \
                or not call.args or not all(is_half(a) for a in call.args):
            return call   # not math on halves (a select, a reinterpret) or CUDA's own
        args = [tirx.Cast(_as_f32(dtype_of(a)), a) for a in call.args]
        return tirx.Cast(dtype_of(call), tvm.ir.Call(call.op, args, ret_ty=str(_as_f32(dtype_of(call)))))
    return tvm_ffi.structural_map(body, (tvm.ir.Call, widen))


def _bfloat16_casts_rounded(body):
    """Each conversion of a float64 value (a run-time `s: float`) to bfloat16, rounded where it is
    made: TVM's llvm lowering computes bfloat16 in float32 and rounds only at stores, so `x + s` added
    s unrounded, and near x = -s it was off by the rounding of s. Round to nearest even on the float32
    bits, as TVM's own store does (NaN kept). Conversions of float32 values stay TVM's (rounded at the
    store, as its bfloat16 arithmetic is): rounding each one cost a bfloat16 softmax on a 16-core Xeon
    451 -> 820 us."""
    def rounded(cast):
        dtype = cast.ty.dtype if hasattr(cast, "ty") else cast.dtype
        source = cast.value.ty.dtype if hasattr(cast.value, "ty") else cast.value.dtype
        if str(dtype.with_lanes(1)) != "bfloat16" or str(source.with_lanes(1)) != "float64":
            return cast
        f32, u32 = _as_f32(dtype), ("uint32" if dtype.lanes == 1 else f"uint32x{dtype.lanes}")
        value = tirx.Cast(f32, cast.value)   # no Let: unrolling and vectorising copy the body
        bits = tirx.reinterpret(u32, value)
        u = lambda n: tirx.const(n, "uint32")  # noqa: E731 - scalars broadcast to the lanes
        nearest = (bits + u(0x7FFF) + tirx.bitwise_and(tirx.shift_right(bits, u(16)), u(1))) & u(0xFFFF0000)
        return tirx.Cast(dtype, tirx.Select(tirx.isnan(value), value, tirx.reinterpret(f32, nearest)))
    return tvm_ffi.structural_map(body, (tirx.Cast, rounded))


def _half_math_in_float32(body, arithmetic=_HALF_ARITH, comparisons=_HALF_COMPARE, halves=("float16",)):
    def dtype_of(expr):
        return expr.ty.dtype if hasattr(expr, "ty") else expr.dtype

    def is_half(expr) -> bool:
        return str(dtype_of(expr).with_lanes(1)) in halves

    def widen(expr):
        return tirx.Cast(_as_f32(dtype_of(expr)), expr)

    def arith(node):
        if not is_half(node.a):
            return node
        return tirx.Cast(dtype_of(node), type(node)(widen(node.a), widen(node.b)))

    def compare(node):
        return type(node)(widen(node.a), widen(node.b)) if is_half(node.a) else node
    return tvm_ffi.structural_map(body, [*((kind, arith) for kind in arithmetic),
                                         *((kind, compare) for kind in comparisons)])


def _bool_buffers_as_bytes(func: tirx.PrimFunc) -> tirx.PrimFunc:
    blocks = _all(func.body, s_tir.SBlock)
    matched = [m.source.source for b in blocks for m in b.match_buffers]
    bools = [buf for b in blocks for buf in b.alloc_buffers if str(buf.ty.dtype) == "bool"
             and not any(buf.same_as(m) for m in matched)]  # a bool view of it would not match int8
    if not bools:
        return func
    fresh = {buf: tvm.ir.Var(buf.name, _retyped(buf.ty, dtype="int8")) for buf in bools}
    retyped = [*fresh.values()]

    def is_retyped(var) -> bool:
        return any(var.same_as(r) for r in retyped)

    def load(node):  # children first: its buffer is already the int8 one
        if not is_retyped(node.source):
            return node
        value = tirx.BufferLoad(node.source, node.indices)
        return tirx.Cast(str(value.ty.dtype).replace("int8", "bool"), value)

    def store(node):
        if not is_retyped(node.buffer):
            return node
        value = tirx.Cast(str(node.value.ty.dtype).replace("bool", "int8"), node.value)
        return tirx.BufferStore(node.buffer, value, node.indices)
    return tvm_ffi.structural_map(func, [(tvm.ir.Var, lambda var: fresh.get(var, var)),
                                         (tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])


def _retyped(ty: tirx.BufferType, dtype=None, shape=None) -> tirx.BufferType:
    """`ty` with another dtype or shape, everything else as it was."""
    return tirx.BufferType(dtype=dtype or ty.dtype, storage_scope=ty.storage_scope,
                           shape=ty.shape if shape is None else shape, strides=ty.strides,
                           elem_offset=ty.elem_offset, data_alignment=ty.data_alignment,
                           offset_factor=ty.offset_factor, layout=ty.layout, allocated_addr=ty.allocated_addr)


# --------------------------------------------------------------------------------------------------
# MetaSchedule
# --------------------------------------------------------------------------------------------------

def tuning_dir() -> Path:
    from .config import cache_dir
    return cache_dir() / "meta_schedule"


def require_tuning_extras() -> None:
    missing = [name for name in TUNE_EXTRAS if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"schedule='meta_schedule' needs {', '.join(missing)}: "
                          "pip install 'babytriton[tune]'")


def _tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    config = dict(target.export())
    if config["kind"] == "llvm" and "num-cores" not in config:
        config["num-cores"] = os.cpu_count() or 1  # MetaSchedule refuses a CPU target without it
    return tvm.target.Target(config)


def meta_schedule(mod: tvm.IRModule, target: tvm.target.Target, trials: int) -> tvm.IRModule:
    """Tune the kernels that the database has no record of, then apply the best records."""
    require_tuning_extras()
    from tvm.s_tir import meta_schedule as ms

    target = _tuning_target(target)
    work_dir = tuning_dir() / hashlib.sha256(str(target).encode()).hexdigest()[:16]
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    tasks = ms.relax_integration.extract_tasks(mod, target)
    todo = [t for t in tasks if database.query_tuning_record(t.dispatched[0], target, "main") is None]
    if todo:
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(todo, work_dir=str(work_dir))
        per_task = max(trials, 1)
        progress = _progress_bar([t.task_name for t in todo], per_task)
        # MetaSchedule logs every round to stdout; keep that in its log files and show the bar instead.
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.DEBUG if debug_enabled() else logging.WARNING)
        ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=str(work_dir), database=database,
            # each build is a fresh process importing TVM: on a busy 2-core machine that alone can take 30 s
            # each build worker knows babytriton's NaN-propagating reducers (cross-thread reductions look them up)
            builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S, initializer=_register_reducers),
            max_trials_global=per_task * len(todo), max_trials_per_task=per_task,
            num_trials_per_iter=min(8, per_task), cost_model="xgb",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress])
        sys.stderr.write("\n")
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)


def _register_reducers():
    from . import legalize
    legalize.reducers()


def _progress_bar(names: list[str], per_task: int):
    """A one-line progress bar on stderr while MetaSchedule measures candidates."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Progress(PyMeasureCallback):
        def __init__(self):
            self.total = per_task * len(names)
            self.done = 0

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            self.done = min(self.done + len(measure_candidates), self.total)
            width = 30
            filled = width * self.done // max(self.total, 1)
            name = names[task_id] if task_id < len(names) else ""
            sys.stderr.write(f"\r[babytriton] tuning [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} trials  {name[:40]:40s}")
            sys.stderr.flush()

    return Progress()
