"""GPU rule Elementwise: injective kernels, each thread moving 16 bytes of every buffer with one vector
load or store (through registers where a call or a bool buffer can't be a vector); a ragged or symbolic
size, an odd row, a slice or a gather as one flat loop in whole vectors of the output with a scalar
tail (`_flat`); a kernel with several outputs as one loop over all of them."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule
from tvm.sym.pattern import detect_linear_equation

from .analysis import (find_all, fuse, in_registers, is_buffer, is_int, normalized, one_loop, only_output,
                       static_product, uses)
from .inlining import GPU_CALL_DEPTH, MAX_TREE_SIZE, inline
from .lanes import (branch_multiples, branched_buffers, computes_bools, contiguous_lanes, flat_index, flat_offsets,
                    innermost_var, make_branches_uniform, narrow_int_math, scalar_calls, substituted, too_wide,
                    uniform_branches, unvectorisable)
from .reasons import decline, hearing
from .unchecked import Schedule

SPREAD_READS = "a kept intermediate read at several elements per output element"
SPREAD_TREE_FACTOR = 4  # how much larger an expression may grow where that intermediate is computed per read


class Elementwise(GPUScheduleRule):
    """Injective kernels: each thread moves 16 bytes of every buffer with one vector load/store (float4
    for float32). Dlight's Fallback moves one scalar per thread, which leaves a third of the memory
    bandwidth unused on large element-wise chains. Rows of whole vectors are split off the row; any
    other size or layout is one flat loop (`_flat`). A kernel with several outputs is one loop over all
    of them (Fallback would launch one kernel per output). Fallback keeps kernels under one block."""

    def __init__(self, threads: int = 256, vector_bytes: int = 16):
        self.threads = threads
        self.vector_bytes = vector_bytes

    def apply(self, func, target, _tunable):
        # math read several times (log1p's formula names its argument seven times: p119's chain of
        # two computed the first 5 times an element) is computed once into a register where the
        # kernel's blocks allow it; else inlined into every read, as before
        with hearing():
            try:
                once = self._apply(func, target, MAX_TREE_SIZE, shared=False)
            except Exception:  # noqa: BLE001 - registers did not fit these blocks: inlined as before
                once = None
        if once is not None and _moves_vectors(once):
            return once
        with hearing() as said:  # (one element a thread where every read is inlined may be vectors)
            sch = self._apply(func, target, MAX_TREE_SIZE)
        if once is not None and (sch is None or not _moves_vectors(sch)):
            return once
        if sch is None and said == [SPREAD_READS]:
            # a kept intermediate that each output element reads at several places (the two halves of
            # a split): no thread can keep it in registers, so it is computed again at each read, in
            # an expression of a bounded few times the usual size; past that, it goes through memory
            with hearing() as said:
                sch = self._apply(func, target, SPREAD_TREE_FACTOR * MAX_TREE_SIZE)
            if sch is None and said == [SPREAD_READS]:
                with hearing() as said:
                    sch = self._launch_per_block(func, target)
        if said:
            decline(said[0])
        return sch

    def _apply(self, func, target, max_tree: int, shared: bool = True):
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        infos = inline(sch, infos, GPU_CALL_DEPTH, max_tree=max_tree, shared=shared)
        if not all(info.is_injective() for info in infos):
            return None
        widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params if is_buffer(p) and len(p.ty.shape)),
                     default=4)  # a 0-d buffer (a run-time scalar) is read once, not in vectors
        if len(infos) > 1:
            if only_output(sch, infos) is not None and _vector_chain(sch, infos, func, self._chain_lanes(func, widest)):
                return self._per_thread(sch, infos, func, widest)
            if _last_is_only_output(sch, infos):
                return self._per_element_staged(sch, infos, func, target, widest, max_tree, shared)
            return self._several_outputs_staged(sch, infos, func, target, widest, max_tree, shared)
        info = infos[0]
        loops = sch.get_loops(info.block_rv)
        if not loops:  # a 0-d kernel (loop counters, scalar math): Fallback gives it one thread
            return decline("a 0-d result: one thread")
        vector, var = self._lanes(sch, info.block_rv, loops, widest)
        total = _total(loops, sch)
        if vector == 1 or not _whole_vectors(total, vector):
            # an odd row, a transpose, slice or gather, a ragged or symbolic size: vectors of the
            # flattened output, a scalar tail
            return self._flat(sch, info.block_rv, func, total, widest)
        make_branches_uniform(sch, info.block_rv, var, vector)
        extent = static_product(sch, loops)
        if extent is not None and not self._size_fits(extent, vector):
            return None  # tiny: Fallback's one block
        # through registers: a call TVM can't vectorise would make every load scalar, and a bool
        # buffer can't be a vector in memory (CUDA moves 4 bools as a ushort4: 8 misaligned bytes)
        # and CUDA has no vector of more than 16 bytes: eight halves computed in float32 (gelu, sigmoid
        # in float32) would be a `make_ulonglong4` of eight floats, which NVRTC refuses
        staged = scalar_calls(sch.get(info.block_rv)) or _has_bool_buffers(func) or too_wide(
            sch.get(info.block_rv), vector) or narrow_int_math(sch.get(info.block_rv))
        # the lanes split off the row first, so their index has no div/mod: each thread's registers
        # then hold exactly its vector of every buffer, and a buffer broadcast along the row is one
        # scalar per vector (split off the fused loop, eight halves of a per-channel scale were an
        # 8-lane index vector: `make_longlong4` of eight, which nvcc refuses)
        *outer, inner = loops
        inner, lanes = sch.split(inner, [None, vector])
        blocks, threads = sch.split(sch.fuse(*outer, inner), [None, self.threads])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        if staged:
            _through_registers(sch, info.block_rv, threads, lanes)
        else:
            sch.vectorize(lanes)
        return sch

    def _launch_per_block(self, func, target):
        """Each block a loop nest of its own, so a launch of its own, its intermediates written to and
        read from global memory: what is left for a kept intermediate that each output element reads
        at several places, too large to compute again at each read. Each nest moves 16 bytes a thread
        where its buffers and math allow (`_vectorised_nest`), else one element a thread."""
        sch, infos = normalized(self, func, target)
        if sch is None:
            return None
        infos = inline(sch, infos, GPU_CALL_DEPTH, max_tree=SPREAD_TREE_FACTOR * MAX_TREE_SIZE)
        if not all(info.is_injective() and sch.get_loops(info.block_rv) for info in infos):
            return decline("a 0-d or not injective block")
        for info in infos:
            self._vectorised_nest(sch, info.block_rv, func)
        return sch

    def _vectorised_nest(self, sch, block, func) -> None:
        """One block's loops bound to blocks of `threads` threads, each thread a vector of 16 bytes of
        the block's widest buffer where the row is whole contiguous vectors and the math has a CUDA
        vector type; one element a thread otherwise."""
        loops = sch.get_loops(block)
        regions = [*sch.get(block).reads, *sch.get(block).writes]
        widest = max((tvm.DataType(r.source.dtype).bits // 8 for r in regions if r.region), default=4)
        vector = max(self.vector_bytes // widest, 1)
        extent = static_product(sch, loops)
        if vector > 1 and extent is not None and extent >= vector * self.threads and not _has_bool_buffers(func) \
                and get_extent(sch, loops[-1]) % vector == 0 and contiguous_lanes(sch, loops[-1], vector) == vector \
                and not branch_multiples(sch.get(block), innermost_var(sch, loops[-1])) \
                and not unvectorisable(sch.get(block), vector) and not computes_bools(sch.get(block)):
            # (a compare in vectors here failed the build: NaN-aware clamps stay one element a thread)
            *outer, inner = loops
            inner, lanes = sch.split(inner, [None, vector])
            grid, threads = sch.split(sch.fuse(*outer, inner), [None, self.threads])
            sch.vectorize(lanes)
        else:
            grid, threads = sch.split(fuse(sch, loops), [None, self.threads])
        sch.bind(grid, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")

    def _lanes(self, sch, block_rv, loops, widest: int) -> tuple:
        """The lanes of each thread's vector in a one-block kernel (16 bytes of its widest buffer where
        the innermost axis is contiguous, 4 where CUDA has no wider type for its math), and the
        block's variable along its innermost loop."""
        # a transpose, slice or gather gets 1: Fallback's scalar loads are what it can do
        vector = contiguous_lanes(sch, loops[-1], max(self.vector_bytes // widest, 1))
        var, block = innermost_var(sch, loops[-1]), sch.get(block_rv)
        if vector > 4 and computes_bools(uniform_branches(block, var, vector, probe=True)):
            vector = 4  # CUDA has no 8-lane bool type (a float16 compare or NaN test)
        if vector > 4 and too_wide(block, vector) and branched_buffers(block) and not scalar_calls(block):
            # half math in float32 (`concat(..) * 2.0` of halves) over a concat's pieces: staging
            # through registers would read the pieces an element at a time; 4 lanes load them as
            # vectors and compute in CUDA's widest float vector
            vector = 4
        return vector, var

    def _flat(self, sch, block, func, total, widest):
        """The kernel's loops as one flat loop over the output, `vector` lanes per thread: each buffer
        read at the output's flat index (an odd row width, a ragged or symbolic size) moves as a
        vector, any other read (a transpose too small to tile, a slice at an odd offset, a gather, a
        broadcast across an odd row) is read in place by each lane. A size not a multiple of the
        vector gets a scalar tail (`_with_tail`), so every other thread's vector stays whole."""
        if isinstance(total, tirx.IntImm) and int(total) < self.threads:
            return decline(f"{int(total)} elements: fewer than one block's {self.threads}")
        loops = sch.get_loops(block)
        inplace = flat_offsets(sch.get(block), [sch.get(loop).extent for loop in loops], total)
        if inplace is None:
            return decline("an output not written at its own flat index")
        vector = max(self.vector_bytes // widest, 1)
        if computes_bools(sch.get(block)) or too_wide(sch.get(block), vector):
            vector = min(vector, 4)  # no 8-lane bool type; half math in float32: CUDA's widest float vector
        inplace = {buffer for buffer, offset in inplace.items() if offset is None or offset % vector}
        staged = bool(inplace) or scalar_calls(sch.get(block)) or _has_bool_buffers(func) or bool(
            branched_buffers(sch.get(block))) or narrow_int_math(sch.get(block))
        if staged and not isinstance(total, tirx.IntImm):
            # registers per thread cut at a symbolic end would be a stack array of a symbolic size
            vector, staged = 1, False
        if vector > 1 and not _lanes_stay_contiguous(sch.get(block), [sch.get(loop).extent for loop in loops],
                                                     total, self.threads, vector, inplace):
            vector, staged = 1, False
        if staged and len(loops) > 1:  # one iteration variable: register copies indexed by it alone
            shape = [sch.get(loop).extent for loop in loops]
            sch.transform_block_layout(block, tirx.IndexMap.from_func(lambda *ivs: [flat_index(ivs, shape)],
                                                                      ndim=len(shape)))
            loops = sch.get_loops(block)
        blocks, threads, lanes = sch.split(fuse(sch, loops), [None, self.threads, vector])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        before, lane_var = sch.get(lanes).body, sch.get(lanes).loop_var  # the block reading global memory
        if staged:
            _flat_registers(sch, block, threads, lanes, inplace | branched_buffers(sch.get(block)))
        elif vector > 1:
            sch.vectorize(lanes)
        if vector == 1 or _whole_vectors(total, vector):
            return sch
        return _with_tail(sch, blocks, threads, before, lane_var, vector, total)

    def _per_thread(self, sch, infos, func, widest):
        """One output and intermediates the inliner kept (an expression past MAX_TREE_SIZE): each
        thread computes its vector of every intermediate into registers, then its vector of the
        output, as CPUElementwise does per vector (Fallback inlined them whole, a tree that grows
        exponentially). Only whole, contiguous, branch-free vectors; anything else stays Fallback's."""
        vector = self._chain_lanes(func, widest)
        blocks = [info.block_rv for info in infos]
        if any(too_wide(sch.get(block), vector) for block in blocks):
            vector = 4  # half math in float32: 4 lanes, CUDA's widest float vector (see `too_wide`)
        loops = sch.get_loops(blocks[-1])
        extent = static_product(sch, loops)
        if vector == 1:
            return decline("elements of 16 bytes or more: no vectors")
        if not self._size_fits(extent, vector):
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
            inner = fuse(sch, sch.get_loops(block)[2:])
            if get_extent(sch, inner) != vector:
                return decline("a kept intermediate's region is wider than the thread's vector")
            sch.vectorize(inner)
        sch.vectorize(lanes)
        return sch

    def _chain_lanes(self, func, widest: int) -> int:
        """The lanes of a vector of 16 bytes of the kernel's widest buffer; 4 where it computes a bool
        (CUDA has no 8-lane bool type: a float16 compare or NaN test)."""
        vector = max(self.vector_bytes // widest, 1)
        return min(vector, 4) if computes_bools(func) else vector

    def _per_element_staged(self, sch, infos, func, target, widest, max_tree: int, shared: bool):
        """`_per_element` with each staging in turn, from a fresh schedule after one that fails (a
        register copy wider than a vector: two blocks read a buffer at two offsets, a split's halves):
        an input's vector loaded once for every block, else once per block, else no vectors."""
        for i, (vectors, share) in enumerate(((True, True), (True, False), (False, False))):
            if i:
                sch, infos = normalized(self, func, target)
                infos = inline(sch, infos, GPU_CALL_DEPTH, max_tree=max_tree, shared=shared)
            try:
                return self._per_element(sch, infos, func, widest, vectors, share)
            except Exception:  # noqa: BLE001 - registers did not fit these blocks (TVM raises several types)
                if not vectors:
                    raise

    def _per_element(self, sch, infos, func, widest, vectors: bool, share: bool):
        """One output and kept intermediates that can't be computed as vectors (a call with no vector
        form, a bool, a select, a broadcast or transpose, a symbolic size): each thread takes `vector`
        consecutive output elements (1 where lanes are not contiguous in every buffer) and computes
        them one at a time, every intermediate into a register of its own per element; its global
        loads and stores move as vectors through registers. Fallback inlined the intermediates
        whole, a tree that grows exponentially, and moved one scalar per thread."""
        blocks = [info.block_rv for info in infos]
        loops = sch.get_loops(blocks[-1])
        if not loops:
            return decline("a 0-d result: one thread")
        total = _total(loops, sch)
        if isinstance(total, tirx.IntImm) and int(total) < self.threads:
            return decline(f"{int(total)} elements: fewer than one block's {self.threads}")
        vector = self._chain_lanes(func, widest) if vectors else 1
        if not (_same_loops(sch, blocks) and isinstance(total, tirx.IntImm) and int(total) >= vector * self.threads
                and get_extent(sch, loops[-1]) % vector == 0 and all(
                    contiguous_lanes(sch, sch.get_loops(b)[-1], vector) == vector for b in blocks)):
            vector = 1  # a plain grid: one element per thread, coalesced on the output
        if vector > 1:
            *outer, inner = loops
            inner, lanes = sch.split(inner, [None, vector])
            grid, threads = sch.split(sch.fuse(*outer, inner), [None, self.threads])
        else:
            grid, threads = sch.split(fuse(sch, loops), [None, self.threads])
            lanes = threads
        sch.bind(grid, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        depth = len(sch.get_loops(blocks[-1]))
        for block in reversed(blocks[:-1]):  # consumers first: each producer then goes under its consumer
            sch.compute_at(block, lanes, preserve_unit_loops=True)
            sch.set_scope(block, 0, "local")
            if any(get_extent(sch, loop) != 1 for loop in sch.get_loops(block)[depth:]):
                return decline(SPREAD_READS)
        if vector > 1:
            for block in blocks:
                _through_registers(sch, block, threads, None, share=share, width=vector)
            sch.unroll(lanes)
        return sch

    def _size_fits(self, extent, vector: int) -> bool | None:
        """Whether `extent` elements (None: a symbolic size) are whole vectors of `vector` lanes that fill
        at least one block; else says why not (`decline`)."""
        if extent is None:
            return decline("a symbolic size")
        if extent < vector * self.threads:
            return decline(f"{extent} elements: fewer than one block's {vector * self.threads}")
        if extent % vector:
            return decline(f"{extent} elements: not whole {vector}-lane vectors")
        return True

    def _several_outputs_staged(self, sch, infos, func, target, widest, max_tree: int, shared: bool):
        """`_several_outputs` with each staging in turn (`_STAGINGS`), from a fresh schedule after one that
        fails: a buffer several blocks read copied into registers once, else once per block (where TVM
        sizes the shared copy by a min..max of two forms of one index: `UnsizedCopy`), else no registers."""
        for i, staging in enumerate(_STAGINGS):
            if i:
                sch, infos = normalized(self, func, target)
                infos = inline(sch, infos, GPU_CALL_DEPTH, max_tree=max_tree, shared=shared)
            try:
                return self._several_outputs(sch, infos, func, widest, *staging)
            except Exception:  # noqa: BLE001 - registers did not fit these blocks (TVM raises several types)
                if staging is _STAGINGS[-1]:
                    raise

    def _several_outputs(self, sch, infos, func, widest, stage: bool = True, share: bool = True):
        """Several outputs (AdamW's p, m and v): one loop computes every block's element in turn,
        vectorised where every block's lanes are contiguous, else one predicated scalar loop (Fallback
        would give each output a loop nest, so a launch of its own)."""
        vector = max(self.vector_bytes // widest, 1)
        if not stage and (computes_bools(func) or any(too_wide(sch.get(info.block_rv), vector) for info in infos)):
            vector = min(vector, 4)  # no registers: 4 lanes, CUDA's widest bool and float vectors
        if not all(sch.get_loops(info.block_rv) for info in infos):  # a 0-d kernel (loop counters, scalar math)
            return decline("a 0-d result: one thread")
        # a transpose, slice or gather: scalar
        lanes_fit = all(contiguous_lanes(sch, sch.get_loops(info.block_rv)[-1], vector) == vector for info in infos)
        # through registers at the full 16 bytes: a bool buffer, math of no CUDA vector type
        staged = stage and (_has_bool_buffers(func) or any(unvectorisable(sch.get(info.block_rv), vector)
                                                           for info in infos))
        extent = static_product(sch, sch.get_loops(infos[0].block_rv))
        # lanes_fit: each block's row is whole vectors, split off before the loops are fused (as `apply`
        # does), so a thread's vector of each buffer is one region TVM can size
        vectors = lanes_fit and extent is not None and extent >= vector * self.threads
        fused = one_loop(sch, [info.block_rv for info in infos], vector if vectors else 1, kept=True)
        if fused is None:
            return decline("outputs of different shapes, or reading each other elsewhere: not one loop")
        for info in infos:  # a kept intermediate: each thread's element or vector of it, in registers
            in_registers(sch, info.block_rv)
        if not vectors:
            blocks, threads = sch.split(fused, [None, self.threads])
            sch.bind(blocks, "blockIdx.x")
            sch.bind(threads, "threadIdx.x")
            return sch
        blocks, threads = sch.split(fused, [None, self.threads])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
        lanes = [sch.get_loops(info.block_rv)[-1] for info in infos]
        if not staged:
            for loop in lanes:
                sch.vectorize(loop)
            return sch
        _results_read_in_registers(sch, infos, threads)
        for info in infos:  # a buffer read by several blocks: the first copy serves all where `share`
            _through_registers(sch, info.block_rv, threads, None, share=share)
        for loop in lanes:
            sch.unroll(loop)
        return sch


def _results_read_in_registers(sch, infos, threads) -> None:
    """A result another block reads (AdamW's m, read by p; p52's h, read by h * h) is computed into
    registers that its readers read, and stored from them as one vector: left in place it was a
    scalar store per lane read back from global memory."""
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    blocks = [info.block_rv for info in infos]
    for block in blocks:
        for index in reversed(range(len(sch.get(block).writes))):
            buffer = sch.get(block).writes[index].source
            readers = [b for b in blocks if any(r.source.same_as(buffer) for r in sch.get(b).reads)]
            # (not a bool: CUDA has no vector of 8 bools to store it from; it is read back in place)
            if readers and any(buffer.same_as(p) for p in params) and str(buffer.dtype) != "bool":
                cache = sch.cache_write(block, index, "local", consumer_blocks=readers)
                sch.reverse_compute_at(cache, threads)
                _vectorize_under(sch, cache, threads)


def _vector_chain(sch, infos, func, vector: int) -> bool:
    """Whether every block of a chain computes whole contiguous vectors of `vector` lanes: no call
    without a vector form, no bool buffer, no select on the row index (`Elementwise._per_thread`)."""
    for info in infos:
        loops = sch.get_loops(info.block_rv)
        var = innermost_var(sch, loops[-1]) if loops else None
        if var is None or branch_multiples(sch.get(info.block_rv), var) != [] or contiguous_lanes(
                sch, loops[-1], vector) != vector or scalar_calls(sch.get(info.block_rv)) or _has_bool_buffers(func):
            return False
    return True


def _last_is_only_output(sch, infos) -> bool:
    """Whether the last block writes the kernel's one output and every other block an intermediate
    (TVM computes no block that writes an output at another's loop)."""
    params = [p for p in sch.mod["main"].params if tirx.is_buffer_var(p)]
    writers = [info for info in infos if any(w.source.same_as(p) for w in sch.get(info.block_rv).writes
                                             for p in params)]
    return len(writers) == 1 and writers[0] is infos[-1]


def _same_loops(sch, blocks) -> bool:
    """Whether the blocks have the same static loop extents (one value per output element each)."""
    extents = [[get_extent(sch, loop) for loop in sch.get_loops(b)] for b in blocks]
    return all(isinstance(e, int) for e in extents[0]) and all(e == extents[0] for e in extents)


class UnsizedCopy(ValueError):
    """A register copy whose region under the thread TVM gives no static size (`_vectorize_under`)."""


# (stage, share) for `_several_outputs`, tried in turn: see `_several_outputs_staged`
_STAGINGS = ((True, True), (True, False), (False, True))


def _total(loops, sch):
    """The product of the loops' extents, an expression where one is symbolic."""
    total = tirx.const(1, sch.get(loops[0]).extent.ty.dtype)
    for loop in loops:
        total = total * sch.get(loop).extent
    return tvm.sym.Analyzer().simplify(total)


def _whole_vectors(total, vector: int) -> bool:
    """Whether `total` elements (an expression) are provably whole vectors of `vector` lanes: a
    static multiple, or a symbolic (n, 4096)."""
    if isinstance(total, tirx.IntImm):
        return int(total) % vector == 0
    known = tvm.sym.Analyzer().modular_set(total)
    return int(known.coeff) % vector == 0 and int(known.base) % vector == 0


def _lanes_stay_contiguous(stmt, shape, total, threads: int, vector: int, inplace) -> bool:
    """Whether TVM's lowering will see each vector of the flattened loop as consecutive elements of
    every buffer moved as a vector (the output, the reads not in `inplace`): their row-major index,
    written through the `//` and `%` that flattening a rank-3 or rank-4 loop gives, must simplify
    back to the loop's own index with only the block, thread and lane bounds known. Where it does not
    (a (127, 8, 33, 2) transpose), the "vector" is a scatter of eight halves, `make_uint4` of eight
    arguments, which nvcc refuses."""
    dtype = stmt.iter_vars[0].var.ty.dtype
    grid, thread, lane = (tirx.Var(name, dtype) for name in ("grid", "thread", "lane"))
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(grid, tvm.ir.Range(0, tirx.floordiv(total + threads * vector - 1, threads * vector)))
    analyzer.bind(thread, tvm.ir.Range(0, threads))
    analyzer.bind(lane, tvm.ir.Range(0, vector))
    flat = grid * (threads * vector) + thread * vector + lane
    strides = [tirx.const(1, dtype)]
    for extent in reversed(shape[1:]):
        strides.insert(0, strides[0] * extent)
    ivs = [iv.var for iv in stmt.iter_vars]
    # the two forms TVM writes a flattened index's parts in: fused and split loops, and an index map's inverse
    forms = [{iv: tirx.floormod(tirx.floordiv(flat, st), e) if i else tirx.floordiv(flat, st)
              for i, (iv, st, e) in enumerate(zip(ivs, strides, shape))},
             {iv: tirx.floordiv(tirx.floormod(flat, st * e), st) if i else tirx.floordiv(flat, st)
              for i, (iv, st, e) in enumerate(zip(ivs, strides, shape))}]
    accesses = [(store.buffer, store.indices) for store in find_all(stmt.body, tirx.BufferStore)]
    accesses += [(load.source, load.indices) for load in find_all(stmt.body, tvm.ir.TensorLoad)
                 if load.indices and not any(load.source.same_as(b) for b in inplace)]
    for buffer, indices in accesses:
        for binding in forms:
            index = flat_index([substituted(i, binding) for i in indices], list(buffer.ty.shape))
            step = detect_linear_equation(analyzer.simplify(index), [lane])
            if len(step) != 2 or not is_int(step[0], 1) or uses(step[1], lane):
                return False
    return True


def _flat_registers(sch, block, threads, lanes, inplace) -> None:
    """Each thread's vector of every buffer read or written at the flat index moves through registers
    as one vector; buffers in `inplace`, bool and 0-d ones are read or written where they are."""
    def vectors(region) -> bool:
        return bool(region.region) and str(region.source.dtype) != "bool" and not any(
            region.source.same_as(b) for b in inplace)
    for index in reversed(range(len(sch.get(block).reads))):
        if vectors(sch.get(block).reads[index]):
            cache = sch.reindex_cache_read(block, index, "local", lambda flat: [flat])
            sch.compute_at(cache, threads)
            _vectorize_under(sch, cache, threads)
    for index in reversed(range(len(sch.get(block).writes))):
        if vectors(sch.get(block).writes[index]):
            cache = sch.reindex_cache_write(block, index, "local", lambda flat: [flat])
            sch.reverse_compute_at(cache, threads)
            _vectorize_under(sch, cache, threads)
    sch.unroll(lanes)


def _with_tail(sch, blocks, threads, before, lane_var, vector: int, total):
    """The schedule with every thread's vector whole: a thread whose vector would pass the end
    (`total` not a multiple of `vector`) skips it, and its elements are computed one by one after,
    by the block `before` (the kernel's block as it read global memory, under the lanes loop of
    `lane_var`), renamed. Predicated per
    lane instead, TVM would compute every thread's vector one lane at a time."""
    func = sch.mod["main"]
    b, t = sch.get(blocks).loop_var, sch.get(threads).loop_var
    index = b * sch.get(threads).extent + t
    whole = tirx.floordiv(total, tirx.const(vector, total.ty.dtype))
    lane = tirx.Var("tail", index.ty.dtype)
    values = [substituted(v, {lane_var: lane}) for v in before.iter_values]
    fresh = {iv.var: tirx.Var(iv.var.name + "_tail", iv.var.ty.dtype) for iv in before.block.iter_vars}
    copy = tvm_ffi.structural_map(before.block, [(tvm.ir.Var, lambda var: fresh.get(var, var))])
    copy = s_tir.SBlock(copy.iter_vars, copy.reads, copy.writes, copy.name_hint + "_tail", copy.body)
    tail = tirx.IfThenElse(index == whole, tirx.For(lane, 0, vector, tirx.ForKind.SERIAL, s_tir.SBlockRealize(
        values, index * vector + lane < total, copy)), None)
    loop = sch.get(threads)

    def uniform(realize):
        if is_int(realize.predicate, 1):
            return realize
        return s_tir.SBlockRealize(realize.iter_values, index < whole, realize.block)
    body = tvm_ffi.structural_map(loop.body, (s_tir.SBlockRealize, uniform))
    new_loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt([body, tail]),
                        loop.thread_binding, loop.annotations)
    new = tvm_ffi.structural_map(func, (tirx.For, lambda node: new_loop if node.same_as(loop) else node))
    return Schedule(new)


def _moves_vectors(sch) -> bool:
    """Whether a schedule has a vectorised loop (a load or store of several elements)."""
    return any(loop.kind == tirx.ForKind.VECTORIZED for loop in find_all(sch.mod["main"].body, tirx.For))


def _has_bool_buffers(func) -> bool:
    """Whether a kernel reads or writes a bool buffer (never a vector in memory: see Elementwise)."""
    return any(is_buffer(p) and str(p.ty.dtype) == "bool" for p in func.params)


def _through_registers(sch, block, threads, lanes, inplace=(), share: bool = True, width: int | None = None) -> None:
    """Each thread loads its inputs into registers and stores its results from them as vectors, and
    computes lane by lane in between: the calls stay scalar, the memory traffic does not. Bool
    buffers and 0-d ones (run-time scalars), and those in `inplace`, are read and written in place,
    one element at a time. An input copy serves every block that reads it, or (not `share`) this
    one; a copy of more than `width` elements (reads at two offsets) raises UnsizedCopy."""
    # a buffer read in a branch (concat's pieces) is read at other offsets per branch, and one read
    # at several indices per element (alibi's `pos[k] - pos[q]`) covers a span that moves with the
    # thread: registers would have to hold a whole row, or a vector of no fixed width, so both are
    # read in place
    branched = branched_buffers(sch.get(block))

    def vectors(region) -> bool:
        return bool(region.region) and str(region.source.dtype) != "bool" and not any(
            region.source.same_as(b) for b in branched) and all(is_int(r.extent, 1) for r in region.region) \
            and region.source.ty.storage_scope != "local" and not any(  # local: another block's copy
                region.source.same_as(b) for b in inplace)
    for index in reversed(range(len(sch.get(block).reads))):
        if vectors(sch.get(block).reads[index]):
            cache = sch.cache_read(block, index, "local", None if share else [block])
            sch.compute_at(cache, threads)
            _vectorize_under(sch, cache, threads, width)
    for index in reversed(range(len(sch.get(block).writes))):
        if vectors(sch.get(block).writes[index]):
            cache = sch.cache_write(block, index, "local")
            sch.reverse_compute_at(cache, threads)
            _vectorize_under(sch, cache, threads, width)
    if lanes is not None:  # None: the caller unrolls (one lanes loop over several blocks)
        sch.unroll(lanes)


def _vectorize_under(sch, block, threads, width: int | None = None) -> None:
    """Vectorise the loops a register copy got under the thread's loop: none where it copies one
    element per thread (a per-row scale), whose innermost loop is the thread's own (vectorised, a
    vector of `threads` lanes: "VectorizeLoop before LiftStorageAlloc")."""
    loops = sch.get_loops(block)
    below = [i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(threads))]
    inner = loops[below[0] + 1:] if below else []
    if inner:
        lanes = fuse(sch, inner)
        if not isinstance(sch.get(lanes).extent, tirx.IntImm):
            # TVM covered its consumers' regions by a min..max it can't size (two blocks reading one
            # copy through a flattened rank-3 index): the build refuses that vector loop
            raise UnsizedCopy(f"a register copy of {sch.get(lanes).extent} elements")
        if width is not None and int(sch.get(lanes).extent) > width:  # a span of reads, not one vector
            raise UnsizedCopy(f"a register copy of {sch.get(lanes).extent} elements, more than {width}")
        sch.vectorize(lanes)
