"""CPU rule CPUMatmul: matrix products (any batch axes) as a register-tiled micro-kernel, element-wise
prologues inlined and epilogues folded into the tile's write-back."""
from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.s_tir.dlight.base import get_extent

from .analysis import fuse, static_product
from .cpu_rule import CPURule, MIN_PARALLEL, pow2_divisor, vector_lanes, vectorizable
from .inlining import inline
from .reasons import decline


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
        rest = inline(sch, [info for info in infos if info.block_rv != block])  # prologues go here
        transposed_b = _matmul_operands(sch.get(block))  # after inlining: the layouts actually read
        if transposed_b is None:
            return decline("operands not read as A[i, k] and B[k, j] (or B[j, k])")
        avx512 = tvm.target.codegen.target_has_features("avx512f", target)
        mr, nr, nb, lanes = self.AVX512 if avx512 else self.AVX2
        if tvm.DataType(sch.get(block).writes[0].source.dtype).bits != 32:
            return decline(f"{sch.get(block).writes[0].source.dtype} results: the tile holds 32-bit ones")
        if transposed_b is not False:
            self._pack(sch, block, transposed_b)
        *batch, i, j, k = sch.get_loops(block)
        rows, cols = get_extent(sch, i), get_extent(sch, j)
        out = None
        if not (isinstance(rows, int) and rows % mr == 0 and isinstance(cols, int) and cols % nr == 0):
            # a ragged tile predicates each lane, and TVM then scalarises the whole micro-kernel
            # (30x slower at 1000x1000): compute on operands zero-padded to whole tiles instead
            sch.pad_einsum(block, [1] * len(batch) + [mr, nr, 1])
            copy_lanes = vector_lanes(sch, target) if vectorizable(sch) else 1
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
        work = static_product(sch, sch.get_loops(block))
        if work is None or work >= MIN_PARALLEL:  # a launch costs more than a small product
            sch.parallel(sch.fuse(*batch, jb, i0))
        sch.decompose_reduction(block, k)
        return True

    @staticmethod
    def _spread(sch, block, lanes: int):
        """An element-wise copy around the product (padding, the padded result's write-back): its
        loops fused, in parallel, the innermost `lanes` vectorised where the size allows."""
        loops = sch.get_loops(block)
        fused = fuse(sch, loops)
        extent = get_extent(sch, fused)
        vector = pow2_divisor(extent, lanes)
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
        work = static_product(sch, loops)
        if len(loops) > 1 and (work is None or work >= MIN_PARALLEL):
            sch.parallel(fuse(sch, loops[:-1]))


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
