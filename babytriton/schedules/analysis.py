"""What several rules ask of a kernel: its normalised blocks (`normalized`), loop extents, reduced axes,
which blocks write results; and the module-wide helpers `updated`, `own_target`, `retype`."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import get_extent

from .reasons import decline
from .unchecked import Schedule


def normalized(rule, func, target):
    """A schedule of `func` and its blocks' infos (every block as [spatial..., reduce...] loops), or
    (None, None) when `func` is no PrimFunc for the rule's target or does not normalise."""
    if not isinstance(func, tirx.PrimFunc) or not rule.is_target_available(target):
        return None, None
    sch = Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos:
        decline("its blocks have no normal form (an opaque block)")
        return None, None
    return sch, infos


def one_loop(sch, blocks, lanes: int = 1, kept: bool = False):
    """The loops of injective blocks that each write a result of the kernel fused into one loop over
    all of them (a kernel with several outputs: AdamW's p, m and v), or None when they don't fit one
    loop: different sizes, a block reading another's result at some index other than its own (a
    later element may not exist yet), or an intermediate buffer unless `kept` (the caller then keeps
    it per step of the one loop, in registers). One block: its loops fused. With
    `lanes` (dividing the innermost extent), each block keeps a loop of that many steps of its row
    inside the one loop, split off before fusing: their indices then have no div or mod."""
    if len(blocks) == 1 and lanes == 1:
        loops = sch.get_loops(blocks[0])
        return fuse(sch, loops) if loops else None
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
    if not kept and not all(any(w.same_as(p) for p in params) for w in written):
        return None  # an intermediate kept as a buffer (too deep to inline): its nest stays apart
    for _, block in nests:
        if not all(_at_own_index(region, block) for region in block.writes) or not all(
                _at_own_index(region, block) for region in block.reads
                if any(region.source.same_as(w) for w in written)):
            return None
    if lanes > 1:
        nests = [(loops[:-1] + sch.split(loops[-1], [None, lanes])[:1], block) for loops, block in nests]
    fused = [fuse(sch, loops) for loops, _ in nests]
    if len(fused) == 1:
        return fused[0]
    try:
        return sch.merge(*fused)
    except Exception:  # noqa: BLE001 - not mergeable (TVM raises several types): each loop on its own
        return None


def _at_own_index(region, block) -> bool:
    """Whether a buffer region is the one element at the block's own flat iteration index, in a
    buffer of the iteration space's size: index for index, or through unit axes the normalised block
    has no variable for (a (1, 4, 260) result of a block over 1040 elements)."""
    ivs = block.iter_vars
    if not all(is_int(r.extent, 1) for r in region.region):
        return False
    if len(region.region) == len(ivs) and all(r.min.same_as(iv.var) for r, iv in zip(region.region, ivs)):
        return True
    analyzer = tvm.sym.Analyzer()
    for iv in ivs:
        analyzer.bind(iv.var, iv.dom)
    size = _product([iv.dom.extent for iv in ivs]) - _product(list(region.source.ty.shape))
    offset = _flat([r.min for r in region.region], list(region.source.ty.shape)) - _flat(
        [iv.var for iv in ivs], [iv.dom.extent for iv in ivs])
    return is_int(analyzer.simplify(size), 0) and is_int(analyzer.simplify(offset), 0)


def _product(extents):
    total = tirx.const(1, "int64")
    for extent in extents:
        total = total * _int64(extent)
    return total


def _flat(indices, shape):
    """The row-major flat index of `indices` into `shape` (int64, whatever the indices' types)."""
    flat = tirx.const(0, "int64")
    for index, extent in zip(indices, shape):
        flat = flat * _int64(extent) + _int64(index)
    return flat


def _int64(expr):
    return expr if str(expr.ty.dtype) == "int64" else tirx.Cast("int64", expr)


def uses(expr, var) -> bool:
    return any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(expr))


def is_int(expr, value: int) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr) == value


def sizes_analyzer(func: tirx.PrimFunc) -> tvm.sym.Analyzer:
    """An analyzer that knows each symbolic size of `func`'s buffer parameters is never negative (in
    [0, 2^62)): `max(n, 0)` simplifies to n, `n // 4096 >= 0` is provable."""
    analyzer = tvm.sym.Analyzer()
    sizes = {dim for param in func.params if is_buffer(param) for dim in param.ty.shape if isinstance(dim, tirx.Var)}
    for size in sizes:
        analyzer.bind(size, tvm.ir.Range(tirx.IntImm(size.ty.dtype, 0), tirx.IntImm(size.ty.dtype, 1 << 62)))
    return analyzer


def is_buffer(param) -> bool:
    """Whether a PrimFunc parameter is a buffer (a size passed as a scalar, a PrimType, is not)."""
    return isinstance(getattr(param, "ty", None), tirx.BufferType)


def fuse(sch, loops):
    return loops[0] if len(loops) == 1 else sch.fuse(*loops)


def reduce_count(sch, block) -> int:
    return sum(iv.iter_type == tirx.IterVar.CommReduce for iv in sch.get(block).iter_vars)


def contiguous_reduction(sch, block) -> bool:
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


def static_product(sch, loops):
    """The product of the loops' extents, or None when one is symbolic."""
    total = 1
    for loop in loops:
        extent = get_extent(sch, loop)
        if not isinstance(extent, int):
            return None
        total *= extent
    return total


def block_value(sch, block):
    """The expression a block stores (None for a block that is no single store)."""
    return stored_value(sch.get(block))


def stored_value(node):
    """The expression a Block node stores (None for a block that is no single store)."""
    return node.body.value if isinstance(node.body, tirx.BufferStore) else None


LONG_LATENCY_CALLS = {f"tirx.{name}" for name in ("exp", "exp2", "exp10", "erf", "tanh", "sigmoid", "log",
                                                   "log2", "log10", "log1p", "pow", "sin", "cos", "tan",
                                                   "atan", "sinh", "cosh", "asin", "acos", "asinh",
                                                   "acosh", "atanh", "atan2")}


def calls_long_math(node) -> bool:
    """Whether `node` calls an exp, erf, tanh or other of LONG_LATENCY_CALLS."""
    calls = []
    tvm_ffi.structural_walk(node, (tvm.ir.expr.Call, calls.append))
    return any(isinstance(c.op, tvm.ir.Op) and c.op.name in LONG_LATENCY_CALLS for c in calls)


def only_output(sch, infos):
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


def math_read_twice(sch, block, through_producers: bool = False, within: bool = False) -> bool:
    """An element-wise block that calls math (exp, log, tanh, ...) and that two blocks read, such as
    a softmax's exp(x - max), read by the row's sum and by the division: kept as a buffer per row (in
    cache) rather than inlined into both, where every element's exp would be computed twice. On one
    thread of the 16-core Xeon a 1024x4096 softmax took 6.6 ms that way, a log-softmax (one exp) 4.0 ms;
    on one Zen 5 core the softmax went from 2.07 to 1.87 ms. `through_producers`: also where the math
    is in the element-wise blocks it reads (`logits - log(-log(u))` read by a max and by the index of
    the max, argmax_as_max.py), which the inliner would copy into it. `within`: also where one block
    reads it twice (a NaN-aware `maximum(h, y)` names h in its test and in its result; p73's Mish,
    inlined there, ran its tanh and log twice an element in a loop TVM left scalar)."""
    value = block_value(sch, block)
    if value is None or reduce_count(sch, block):
        return False
    consumers = sch.get_consumers(block)
    twice = len(consumers) >= 2 or within and any(_loads_of(sch, c, block) >= 2 for c in consumers)
    return twice and (calls_long_math(value) or through_producers and _math_upstream(sch, block))


def _loads_of(sch, consumer, producer) -> int:
    """How many loads of what `producer` writes `consumer`'s stored value makes."""
    value = block_value(sch, consumer)
    written = [w.source for w in sch.get(producer).writes]
    return 0 if value is None else sum(
        1 for load in find_all(value, tvm.ir.TensorLoad) if any(load.source.same_as(w) for w in written))


def math_read_broadcast(sch, block) -> bool:
    """An element-wise block that calls math and that a block over more elements reads, such as a
    log-softmax's `log(sum)` per row, read by every element of the row: kept (computed once per row)
    rather than inlined, where its math would run once per element (rows of 64: 64 logs a row)."""
    value = block_value(sch, block)
    if value is None or reduce_count(sch, block) or not calls_long_math(value):
        return False
    size = static_product(sch, sch.get_loops(block))
    return size is not None and any(
        (other := static_product(sch, sch.get_loops(c))) is not None and other > size for c in sch.get_consumers(block))


def compared_with_its_reduction(sch, block) -> bool:
    """An element-wise block that a reduction reads and that another block compares for equality
    (`y == y.max(-1)`, an argmax as its max's first index: argmax_as_max.py): kept, so that both read
    the same stored values. Inlined into each, it is computed twice, and LLVM may fuse a multiply and
    add in one copy and not the other (a vector loop and its scalar tail): the max then equals no
    element of its row."""
    if block_value(sch, block) is None or reduce_count(sch, block):
        return False
    consumers = sch.get_consumers(block)
    if not any(reduce_count(sch, c) for c in consumers):
        return False
    values = [block_value(sch, c) for c in consumers if not reduce_count(sch, c)]
    return any(v is not None and (find_all(v, tirx.EQ) or find_all(v, tirx.NE)) for v in values)


def _math_upstream(sch, block) -> bool:
    """Whether an element-wise block that `block` reads, or one that such a block reads, calls math:
    inlined, its math would be computed in each of `block`'s readers."""
    for producer in sch.get_producers(block):
        value = block_value(sch, producer)
        if value is not None and not reduce_count(sch, producer) and (
                calls_long_math(value) or _math_upstream(sch, producer)):
            return True
    return False


def kept_in_order(infos, remaining, kept) -> list:
    """The blocks of `infos` that `inline(..., keep=kept)` left (`remaining`) or kept, in order."""
    return [info.block_rv for info in infos if any(info is other for other in [*remaining, *kept])]


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


def find_all(node, kind) -> list:
    found = []
    tvm_ffi.structural_walk(node, (kind, found.append))
    return found


def retype(ty: tirx.BufferType, dtype=None, shape=None) -> tirx.BufferType:
    """`ty` with another dtype or shape, everything else as it was."""
    return tirx.BufferType(dtype=dtype or ty.dtype, storage_scope=ty.storage_scope,
                           shape=ty.shape if shape is None else shape, strides=ty.strides,
                           elem_offset=ty.elem_offset, data_alignment=ty.data_alignment,
                           offset_factor=ty.offset_factor, layout=ty.layout, allocated_addr=ty.allocated_addr)


def in_registers(sch, block) -> None:
    """What `block` writes that is no result of the kernel stays in each thread's registers ("local"):
    a value every thread computes or holds after an all-reduce, or that only its writer reads."""
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    for index, region in enumerate(sch.get(block).writes):
        if not any(region.source.same_as(p) for p in params):
            sch.set_scope(block, index, "local")
