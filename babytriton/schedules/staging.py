"""A thread's vectors moved through registers (`staged`) where its math is computed lane by lane: a
call TVM's vectoriser has no vector form of (rsqrt, erf) makes it run the whole loop a lane at a time,
loads and stores included. SmallReduction's columns and SplitReduction's element-wise grids share it."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base import get_extent
from tvm.sym.pattern import detect_linear_equation

from .analysis import is_buffer, is_int, uses


def staged(sch, block, lane, var, lanes, readers=()) -> None:
    """The block's reads and writes of whole vectors of the kernel's buffers moved through registers,
    a vector at a time, where its math is computed lane by lane (a call with no vector form, an
    argmax's pairs): TVM's vectoriser would run the whole loop a lane at a time, loads and stores
    included (p0's rsqrt: 8 scalar stores a thread where 2 float4 ones do)."""
    if var is None:
        return
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    for index in reversed(range(len(sch.get(block).reads))):
        if whole_vector(sch.get(block).reads[index], var, params):
            source = sch.get(block).reads[index].source
            also = [b for b in readers if any(r.source.same_as(source) for r in sch.get(b).reads)]
            cache = sch.cache_read(block, index, "local", consumer_blocks=also or [block])
            sch.compute_at(cache, lane, preserve_unit_loops=True)
            copy_loops(sch, cache, lane, lanes)
    for index in range(len(sch.get(block).writes)):
        if whole_vector(sch.get(block).writes[index], var, params):
            cache = sch.cache_write(block, index, "local")
            sch.reverse_compute_at(cache, lane, preserve_unit_loops=True)
            guarded_like(sch, cache, block)
            copy_loops(sch, cache, lane, lanes)


def guarded_like(sch, copy, block) -> None:
    """The copy's steps run only where `block`'s do: TVM's reverse_compute_at drops the predicate of a
    ragged split of the threads (5 x 3 columns on 256 threads), and the copy would store past the
    buffer's end. The predicate names only the block and thread loops, which the copy shares."""
    predicate = sch.get(sch.get_loops(block)[-1]).body.predicate
    if is_int(predicate, 1):
        return
    loop = sch.get_loops(copy)[-1]
    node = sch.get(loop)
    realize = node.body
    new = tirx.For(node.loop_var, node.min, node.extent, node.kind,
                   s_tir.SBlockRealize(realize.iter_values, predicate, realize.block), node.thread_binding,
                   node.annotations)
    sch.state.replace(sch.get_sref(loop), new, {realize.block: realize.block})


def whole_vector(region, var, params) -> bool:
    """Whether a region of one element of a kernel buffer (not bool: never a vector in memory) has
    `var` in its last index alone, step 1: the thread's vector is consecutive elements of it."""
    if not any(region.source.same_as(p) for p in params) or str(region.source.ty.dtype) == "bool" or not all(
            is_int(r.extent, 1) for r in region.region) or not region.region:
        return False
    *outer, last = (r.min for r in region.region)
    coeffs = detect_linear_equation(last, [var])
    return len(coeffs) == 2 and is_int(coeffs[0], 1) and not uses(coeffs[1], var) and not any(
        uses(i, var) for i in outer)


def copy_loops(sch, copy, lane, lanes) -> None:
    """A register copy's loops in the thread: the innermost, a vector, vectorised; the others unrolled."""
    loops = sch.get_loops(copy)
    loops = loops[next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(lane))) + 1:]
    *outer, inner = loops
    if get_extent(sch, inner) == lanes and lanes * tvm.DataType(sch.get(copy).writes[0].source.ty.dtype).bits <= 128:
        sch.vectorize(inner)
    else:
        outer.append(inner)
    for loop in outer:
        if isinstance(get_extent(sch, loop), int):
            sch.unroll(loop)
