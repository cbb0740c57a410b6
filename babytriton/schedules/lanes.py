"""How many lanes one vector may have: consecutive steps of the innermost loop that touch consecutive
elements of every buffer (`contiguous_lanes`), and the `if_then_else` on that loop's index (a
concat's pieces) rewritten to take one side per vector (`make_branches_uniform`); and whether a
block's math can be one CUDA vector at all (`unvectorisable`), which the GPU strategies share."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from ..core.types import is_float_dtype
from .analysis import find_all, is_int, uses


def branched_buffers(block) -> set:
    """The buffers a block reads inside an arm of an `if_then_else` (a concat's pieces)."""
    branched = set()

    def visit(call):
        if call.op.same_as(_IF_THEN_ELSE):
            for arm in call.args[1:]:
                tvm_ffi.structural_walk(arm, (tvm.ir.TensorLoad, lambda load: branched.add(load.source)))
    tvm_ffi.structural_walk(block.body, (tvm.ir.Call, visit))
    return branched


def contiguous_lanes(sch, inner_loop, lanes: int) -> int:
    """The most lanes (a power of two <= `lanes`, 1 for none) such that that many consecutive, aligned
    steps of the innermost loop read and write as many consecutive, aligned elements of every buffer
    (or one element, broadcast), and take one side of every `if_then_else` on the loop's index (a
    concat's pieces): only then is one vector load or store per buffer the same as the scalar ones."""
    var = innermost_var(sch, inner_loop)
    if var is None:
        return 1
    return lanes_along(sch.get(inner_loop).body.block, var, int(sch.get(inner_loop).extent), lanes)


def lanes_along(block, var, extent: int, lanes: int) -> int:
    """`contiguous_lanes` for the block's iteration variable `var`, `extent` steps of it in a loop
    (its bound to a loop of its own need not be the variable alone: a thread's vector after
    compute_at)."""
    multiples = branch_multiples(block, var)
    if multiples is None:
        return 1  # lanes would take different sides: TVM runs such a "vector" one lane at a time
    accesses = [(a.source, a.indices) for a in find_all(block.body, tvm.ir.TensorLoad)]
    accesses += [(a.buffer, a.indices) for a in find_all(block.body, tirx.BufferStore)]
    analyzer = tvm.sym.Analyzer()
    for buffer, indices in accesses:
        if not any(uses(i, var) for i in indices):
            continue  # a 0-d buffer, or the same element for every lane: a broadcast
        *outer, last = indices
        coeffs = detect_linear_equation(last, [var])
        row = buffer.ty.shape[-1]
        if any(uses(i, var) for i in outer) or len(coeffs) != 2 or not is_int(coeffs[0], 1) or not isinstance(
                row, tirx.IntImm):
            return 1  # a transpose's lanes are a column apart
        offset = analyzer.modular_set(coeffs[1])  # a split's second piece starts `offset` into the row
        multiples += [int(row), int(offset.coeff), int(offset.base)]
    return most_lanes(multiples + [extent], lanes)


def innermost_var(sch, inner_loop):
    """The iteration variable of the block directly in `inner_loop` that is that loop's index, or None
    (no such block, a symbolic extent, or the loop feeds other variables too)."""
    loop = sch.get(inner_loop)
    realize = loop.body
    if not isinstance(loop.extent, tirx.IntImm) or not isinstance(realize, s_tir.SBlockRealize):
        return None
    inner = [iv.var for iv, value in zip(realize.block.iter_vars, realize.iter_values) if value.same_as(loop.loop_var)]
    others = [value for value in realize.iter_values if not value.same_as(loop.loop_var)]
    if len(inner) != 1 or any(uses(value, loop.loop_var) for value in others):
        return None
    return inner[0]


def most_lanes(multiples, lanes: int) -> int:
    """The largest power of two <= lanes that divides every one of `multiples`."""
    while lanes > 1 and any(m % lanes for m in multiples):
        lanes //= 2
    return lanes


IF_THEN_ELSE = _IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
_COMPARES = (tirx.LT, tirx.LE, tirx.GE, tirx.GT)


def branch_multiples(block, var) -> list[int] | None:
    """What a lane count must divide for each `if_then_else` on `var` in the block (a concat's pick of
    a piece) to take the same side for all lanes: the thresholds of its compares. None when one
    depends on var otherwise (a load, `var == c`)."""
    multiples = []
    for call in find_all(block.body, tvm.ir.Call):
        if call.op.same_as(_IF_THEN_ELSE) and uses(call.args[0], var):
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
    if not uses(cond, var):
        return []
    bound = threshold(cond, var)
    return None if bound is None else [bound[0]]


def threshold(cond, var):
    """A compare of `var + c` with a constant as (t, above): `var >= t` if above, else `var < t`."""
    if not isinstance(cond, _COMPARES):
        return None
    coeffs = detect_linear_equation(cond.a - cond.b, [var])
    if len(coeffs) != 2 or not isinstance(coeffs[1], tirx.IntImm) or not (
            is_int(coeffs[0], 1) or is_int(coeffs[0], -1)):
        return None
    c, less = int(coeffs[1]), isinstance(cond, (tirx.LT, tirx.LE))
    if is_int(coeffs[0], -1):  # c - var < 0 is var - c > 0
        c, less = -c, not less
    strict = isinstance(cond, (tirx.LT, tirx.GT))
    # var + c < 0: var < -c; var + c <= 0: var < 1 - c; var + c >= 0: var >= -c; var + c > 0: var >= 1 - c
    return (-c if strict == less else 1 - c), not less


def uniform_branches(block, var, lanes: int, probe: bool = False):
    """The block with each `if_then_else` condition on `var` reading var only through `var // lanes`:
    the same value, so one side, for all lanes of a vector, which TVM then loads whole (a vector whose
    lanes may go apart it runs one lane at a time). `var >= t` is `var // lanes >= t // lanes` for every
    var when lanes divides t (`branch_multiples`). `probe`: such conditions become `True` instead,
    to see what else computes bools."""
    def uniform(cond):
        if isinstance(cond, (tirx.And, tirx.Or)):
            return type(cond)(uniform(cond.a), uniform(cond.b))
        if isinstance(cond, tirx.Not):
            return tirx.Not(uniform(cond.a))
        if not uses(cond, var):
            return cond
        t, above = threshold(cond, var)
        quotient, bound = tirx.floordiv(var, tirx.const(lanes, var.ty.dtype)), tirx.const(t // lanes, var.ty.dtype)
        return quotient >= bound if above else quotient < bound

    def call(node):
        if not node.op.same_as(_IF_THEN_ELSE) or not uses(node.args[0], var):
            return node
        return tirx.if_then_else(tirx.const(True) if probe else uniform(node.args[0]), node.args[1], node.args[2])
    return tvm_ffi.structural_map(block, [(tvm.ir.Call, call)])


def make_branches_uniform(sch, block_rv, var, lanes: int) -> None:
    """Replace the block by `uniform_branches` of it, in place (its block and loop handles stay valid)."""
    old = sch.get(block_rv)
    new = uniform_branches(old, var, lanes)
    if not new.same_as(old):
        sch.state.replace(sch.get_sref(block_rv), new, {old: new})


def uniform_lanes(sch, block_rv, inner_loop, lanes: int) -> int:
    """At most `lanes`, fewer where that lets each `if_then_else` on the innermost index (a concat's
    pick of a piece) take one side per vector, which then loads whole; the block says so in its
    conditions (`make_branches_uniform`). Conditions no lane count makes uniform leave `lanes`."""
    var = innermost_var(sch, inner_loop)
    multiples = branch_multiples(sch.get(block_rv), var) if var is not None else None
    if not multiples:
        return lanes
    most = most_lanes(multiples + [int(sch.get(inner_loop).extent)], lanes)
    if most > 1:
        make_branches_uniform(sch, block_rv, var, most)
    return most if most > 1 else lanes


def across_reads(block, ivs) -> dict[int, int]:
    """The reads of `block` (iteration variables `ivs`, the output's innermost last) that go across
    their buffer's contiguous axis, as {index in block.reads: k}: the read's last index is `ivs[k] + c`
    for some k other than the innermost, and the innermost variable indexes an outer axis of it (a
    transposed or permuted input; a read of one element per row is a broadcast, not across)."""
    found = {}
    inner = ivs[-1]
    for index, region in enumerate(block.reads):
        if len(region.region) < 2 or not all(is_int(r.extent, 1) for r in region.region):
            continue
        *outer, last = (r.min for r in region.region)
        coeffs = detect_linear_equation(last, ivs)
        if len(coeffs) != len(ivs) + 1 or not any(uses(i, inner) for i in outer):
            continue
        ones = [a for a, c in enumerate(coeffs[:-1]) if is_int(c, 1)]
        if len(ones) == 1 and ones[0] != len(ivs) - 1 and all(
                is_int(c, 0) for a, c in enumerate(coeffs[:-1]) if a != ones[0]):
            found[index] = ones[0]
    return found


def flat_index(ivs, shape):
    """The row-major flat index of the iteration variables `ivs` in a space of `shape`."""
    flat = ivs[0]
    for iv, extent in zip(ivs[1:], shape[1:]):
        flat = flat * extent + iv
    return flat


def substituted(expr, binding: dict):
    """`expr` with each variable that is a key of `binding` replaced by its value."""
    return tvm_ffi.structural_map(expr, [(tvm.ir.Var, lambda var: binding.get(var, var))])


def flat_offsets(stmt, shape, total):
    """For a block over loops of extents `shape` (`total` elements): each buffer it reads, with the
    constant offset of its flat index from the output's flat index where it is that index plus a
    constant (so one vector of the flattened loop is one vector of it), else None (a transpose, a
    broadcast, a slice of a wider row, a gather); None in place of the dict where a store is not at
    the output's own flat index."""
    ivs = [iv.var for iv in stmt.iter_vars]
    flat = tirx.Var("flat", ivs[0].ty.dtype if ivs else "int64")
    binding, stride = {}, tirx.const(1, flat.ty.dtype)
    for i, (iv, extent) in reversed(list(enumerate(zip(ivs, shape)))):
        quotient = flat if is_int(stride, 1) else tirx.floordiv(flat, stride)
        binding[iv] = quotient if i == 0 else tirx.floormod(quotient, extent)  # the outermost needs no mod
        stride = stride * extent
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(flat, tvm.ir.Range(0, total))

    def offset(buffer, indices):
        if len(indices) == len(ivs) and all(i.same_as(v) for i, v in zip(indices, ivs)) and all(
                tvm_ffi.structural_equal(d, e) for d, e in zip(buffer.ty.shape, shape)):
            return 0  # the output's own index (a symbolic size the simplifier can't flatten)
        if not indices:
            return None
        index = analyzer.simplify(flat_index([substituted(i, binding) for i in indices], list(buffer.ty.shape)))
        coeffs = detect_linear_equation(index, [flat])
        if len(coeffs) != 2 or not is_int(coeffs[0], 1) or not isinstance(analyzer.simplify(coeffs[1]), tirx.IntImm):
            return None
        return int(analyzer.simplify(coeffs[1]))
    if any(offset(store.buffer, store.indices) != 0 for store in find_all(stmt.body, tirx.BufferStore)):
        return None
    reads = {}
    for load in find_all(stmt.body, tvm.ir.TensorLoad):
        here = offset(load.source, load.indices)
        reads[load.source] = here if load.source not in reads or reads[load.source] == here else None
    return reads


def one_vector(region, step) -> bool:
    """Whether a read spans at most one vector of the step's lanes along its last axis: two reads of
    one buffer far apart (the halves of `split`: x[j] and x[4096 + j]) span thousands of elements,
    which as one cached "vector" CUDA has no type for (`int32x4100`: perf fuzzer p161)."""
    extent, lanes = region.region[-1].extent, step.extent
    return isinstance(lanes, tirx.IntImm) and int(extent) <= int(lanes)


# -- whether a block's math can be one CUDA vector ------------------------------------------------

def unvectorisable(block, lanes: int) -> bool:
    """Whether a block's math can't be one CUDA vector of `lanes`: a call with no vector form, narrow
    integers, float math wider than 16 bytes, or bools in more than 4 lanes (CUDA has no 8-lane bool
    type: a float16 compare, a NaN test, the selects of a NaN-aware clamp). Such a block still moves
    whole 16-byte vectors, through registers, and computes lane by lane in between."""
    return scalar_calls(block) or too_wide(block, lanes) or narrow_int_math(block) or (
        lanes > 4 and computes_bools(block))


def too_wide(block, lanes: int) -> bool:
    """Whether a block would compute a float vector CUDA has no type for: more than 4 lanes of 32 or
    64 bits (eight halves computed in float32 became a `make_ulonglong4` of eight floats, which NVRTC
    refuses). Integer index arithmetic is not counted: it stays scalar."""
    return lanes > 4 and _computes(block.body, lambda node, dtype: is_float_dtype(str(dtype)) and dtype.bits >= 32)


def narrow_int_math(block) -> bool:
    """Whether a block computes with integers narrower than 32 bits (int8 `x + c`, a quantisation's
    cast to int8): TVM's CUDA code for their vectors fails where a value is broadcast to the lanes
    (a per-row int8 `c`: "Check failed: p.has_value()"; 16 int8 or 8 int16 lanes: a `make_int4` of
    too many arguments). Loads and stores of them as vectors are fine (through registers)."""
    return _computes(block.body, lambda node, dtype: not isinstance(node, (tvm.ir.TensorLoad, tirx.IntImm))
                     and dtype.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) and dtype.bits < 32
                     and not str(dtype).startswith("bool"))


def scalar_calls(block) -> bool:
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


def computes_bools(node) -> bool:
    """Whether a kernel (or block) computes a bool anywhere (a compare, a NaN test, a select's condition)."""
    # a constant (a block's `T.bool(True)` predicate) is never a vector of bools
    return _computes(getattr(node, "body", node),
                     lambda expr, dtype: str(dtype).startswith("bool") and not isinstance(expr, tirx.IntImm))


def _computes(node, test) -> bool:
    """Whether some scalar expression under `node` has a type for which `test(expr, DataType)` holds."""
    found = []

    def visit(expr):
        ty = getattr(expr, "ty", None) if isinstance(expr, tvm.ir.Expr) else None
        if isinstance(ty, tvm.ir.PrimType) and test(expr, tvm.DataType(str(ty.dtype))):
            found.append(expr)
    tvm_ffi.structural_walk(node, visit)
    return bool(found)
