"""The TIR passes around scheduling: empty kernels skipped, reductions initialised outside their loops,
bool buffers stored as bytes and half-precision math computed in float32 where targets need it."""
from __future__ import annotations

import functools

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from .analysis import find_all, own_target, retype, updated
from .fast_math import as_f32, bool_casts_as_selects, lanes_of
from .unchecked import Schedule
from .wrappers import RULE_ATTR


def empty_kernels_done(mod: tvm.IRModule) -> tvm.IRModule:
    """Kernels whose results all have a static size 0 lose their body before any rule sees them
    (Dlight's GPU rules divided by the zero extent: a static (3, 0) softmax failed to compile)."""
    def done(func):
        emptied = _skip_if_empty(func, None)   # None: only static sizes of 0 are decided here
        return func if emptied.same_as(func) else \
            emptied.with_attrs({"tirx.is_scheduled": True, RULE_ATTR: "none (no elements)"})
    return updated(mod, tirx.PrimFunc, done)


def unit_reductions_as_maps(mod: tvm.IRModule) -> tvm.IRModule:
    """A reduction over axes of size 1 only (`a @ b` of an (n, 1) by a (1, m), `x.sum(1)` of an (n, 1))
    as the element-wise block it is: its one step with the init's value where it reads its own
    result. Dlight's normalisation drops such a block's unit reduction loop but keeps its init, and
    Fallback then inlined the consumer into it (`x0 * (a @ b)` of int64 (1, 1) matrices: the float32
    product was added to the int64 sum, which the GPU build refused; a float one read inf * 0 = NaN)."""
    def as_map(realize):
        block = realize.block
        reduced = [iv for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
        if block.init is None or not reduced or any(not _is_one(iv.dom.extent) for iv in reduced):
            return realize
        init, store = block.init, block.body
        if not (isinstance(init, tirx.BufferStore) and isinstance(store, tirx.BufferStore)
                and init.buffer.same_as(store.buffer)):
            return realize
        at = {iv.var: iv.dom.min for iv in reduced}
        own = lambda load: init.value if load.source.same_as(store.buffer) else load  # noqa: E731
        value = tvm_ffi.structural_map(store.value, (tvm.ir.TensorLoad, own))
        body = tvm_ffi.structural_map(tirx.BufferStore(store.buffer, value, store.indices),
                                      (tvm.ir.Var, lambda var: at.get(var, var)))
        reads = [tvm_ffi.structural_map(r, (tvm.ir.Var, lambda var: at.get(var, var))) for r in block.reads
                 if not r.source.same_as(store.buffer)]
        kept = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values) if iv.iter_type != tirx.IterVar.CommReduce]
        new_block = s_tir.SBlock([iv for iv, _ in kept], reads, block.writes, block.name_hint, body, None,
                                 block.alloc_buffers, block.match_buffers, block.annotations)
        return s_tir.SBlockRealize([v for _, v in kept], realize.predicate, new_block)

    def rewritten(func):
        body = tvm_ffi.structural_map(func.body, (s_tir.SBlockRealize, as_map))
        if body.same_as(func.body):
            return func
        # the unit loop that stepped the reduction binds nothing now: gone, so that rules see a normal form
        return func.with_body(tvm_ffi.structural_map(body, (tirx.For, _unused_unit_loop_dropped)))
    return updated(mod, tirx.PrimFunc, rewritten)


_OPAQUE = 8  # relax.OpPatternKind.kOpaque


def kernels_as_built(mod: tvm.IRModule) -> tvm.IRModule:
    """Every kernel marked opaque once scheduled: tvm.compile runs FuseOps and FuseTIR again, which
    made a group of a multi-output kernel one of whose results had become unused (the `if` reading it
    dropped as dead code) and turned that result into a buffer inside the scheduled kernel ("Cannot
    allocate global memory when targeting CUDA": fuzz). The kernels listed are the kernels run."""
    def opaque(func):
        pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
        return func if pattern is not None and int(pattern) == _OPAQUE else func.with_attr("op_pattern", _OPAQUE)
    return updated(mod, tirx.PrimFunc, opaque)


def _is_one(extent) -> bool:
    return isinstance(extent, tirx.IntImm) and extent.value == 1


def _unused_unit_loop_dropped(loop):
    if not _is_one(loop.extent) or loop.kind != tirx.ForKind.SERIAL or loop.annotations:
        return loop
    return loop if _uses(loop.body, loop.loop_var) else loop.body


def init_outside_reductions(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every reduction left with its init inside its reduction loops a separate init loop nest.
    TVM lowers such an init to "on the first reduction step", which never comes when a reduced size is
    0 at run time (a symbolic n = 0): the result would be uninitialised memory instead of the sum's 0,
    the product's 1, a matrix product's zeros. Reductions whose loops are bound to GPU threads are
    left to TVM's cross-thread lowering, which starts every thread from the identity."""
    def decomposed(func):
        sch = Schedule(func)
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
        guard = _any_of(conditions)
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


def _any_of(conditions):
    """`c1 or c2 or ...` as `shared and (rest1 or rest2 ...)`, the sizes every output has taken out.
    TVM's analyzer learns each fact of an `and` around the body but nothing from an `or`: under
    `(d1 > 0 and d2 > 0) or (d1 > 0 and d2 > 0)` (two outputs) it sized an intermediate buffer by
    its accesses `i // d2` with a division by d2, which TVM's storage pass computes above the guard
    (SIGFPE for a (3, 0) tensor); knowing d2 > 0 the size is d1 * d2."""
    def facts(c):
        return facts(c.a) + facts(c.b) if isinstance(c, tirx.And) else [c]

    def among(c, cs):
        return any(tvm_ffi.structural_equal(c, d) for d in cs)
    split = [facts(c) for c in conditions]
    shared = [c for c in split[0] if all(among(c, other) for other in split[1:])]
    rests = [[c for c in cs if not among(c, shared)] for cs in split]
    if shared and any(not rest for rest in rests):  # an output empty only where the shared sizes are 0
        return functools.reduce(tirx.And, shared)
    either = functools.reduce(tirx.Or, [functools.reduce(tirx.And, rest) for rest in rests])
    return functools.reduce(tirx.And, [*shared, either])


def _nonempty(buffer):
    """Whether a buffer has elements: True, False, or a run-time condition on its symbolic sizes."""
    sizes = [d for d in buffer.shape if not isinstance(d, tirx.IntImm)]
    if any(isinstance(d, tirx.IntImm) and int(d) == 0 for d in buffer.shape):
        return False
    return functools.reduce(tirx.And, [d > 0 for d in sizes]) if sizes else True


def _written_params(func) -> list:
    written = [region.source for realize in find_all(func.body, s_tir.SBlockRealize) for region in realize.block.writes]
    written += [store.buffer for store in find_all(func.body, tirx.BufferStore)]
    return [p for p in func.params if tirx.is_buffer_var(p) and any(p.same_as(w) for w in written)]


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
        return _bool_buffers_as_bytes(func.with_body(bool_casts_as_selects(func.body, scalar_too=True)))
    return updated(mod, tirx.PrimFunc, on_cpu)


def bfloat16_broadcasts_serial(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """On a CPU, a vectorised loop that stores one bfloat16 value in every lane (`broadcast_to` of a
    bfloat16 column: fuzz) runs as a serial loop, which LLVM's loop vectorizer still takes. TVM's
    bfloat16 storage legalization retypes such a store to uint16 lanes but keeps the broadcast value's
    bfloat16 type, and the build refused it (the same for a constant: cpu_rule.vectorizable)."""
    def on_cpu(func):
        own = own_target(func, target)
        if own is None or own.kind.name != "llvm":
            return func
        return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, _serial_if_broadcast)))
    return updated(mod, tirx.PrimFunc, on_cpu)


def _serial_if_broadcast(loop):
    if loop.kind != tirx.ForKind.VECTORIZED:
        return loop
    stores, in_blocks = [], []
    for realize in find_all(loop.body, s_tir.SBlockRealize):  # a block's values read its iterators
        binding = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values)}
        stores += [(store, binding) for store in find_all(realize.block.body, tirx.BufferStore)]
        in_blocks += [store for store, _ in stores]
    # a store outside any block (one in a block, read without its binding, never uses the loop)
    stores += [(store, {}) for store in find_all(loop.body, tirx.BufferStore)
               if not any(store.same_as(other) for other in in_blocks)]
    # judged as TVM's simplifier will leave it: `where(c, x, x)`, `x - x` or `where(True, ...)` of
    # per-lane values becomes one value for every lane only there (fuzz, seed 41)
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    for store, binding in stores:
        value = tvm_ffi.structural_map(store.value, (tvm.ir.Var, lambda var: binding.get(var, var)))
        if str(store.buffer.dtype) == "bfloat16" and not _uses(analyzer.simplify(value), loop.loop_var):
            return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                            loop.thread_binding, loop.annotations)
    return loop


def bfloat16_reads_in_binds(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """On a CPU, each bfloat16 element read inside a `let` value (the (index, value) step of an argmax,
    read through a float32 cast) widened to float32 by its bits, and bfloat16 math on it there (a
    producer inlined into that step: `argmax(abs(x))`) done in float32: TVM's bfloat16 compute
    legalization skips `let` values, its storage pass still retypes the buffer to uint16, and the cast
    then converted the bits as an integer (a whole-tensor bfloat16 argmin returned the wrong index),
    or `llvm.fabs` of bfloat16 met a uint16 load and LLVM's code generator crashed the process."""
    def on_cpu(func):
        own = own_target(func, target)
        if own is None or own.kind.name != "llvm":
            return func
        return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.Bind, _bind_reads_widened),
                                                                 (tirx.Let, _let_reads_widened)]))
    return updated(mod, tirx.PrimFunc, on_cpu)


def _bind_reads_widened(bind):
    value = _bfloat16_reads_widened(bind.value)
    return bind if value.same_as(bind.value) else tirx.Bind(bind.var, value)


def _let_reads_widened(let):
    value = _bfloat16_reads_widened(let.value)
    return let if value.same_as(let.value) else tirx.Let(let.var, value, let.body)


def _bfloat16_reads_widened(expr):
    """`expr` with each cast, comparison and test (`isnan`) of bfloat16 values computed in float32
    (`_in_float32`) where it can be."""
    def is_half(e) -> bool:
        return str(_dtype(e).with_lanes(1)) == "bfloat16"

    def wide(e):
        return _in_float32(e) if is_half(e) else None

    def widened(cast):
        value = wide(cast.value)
        return cast if value is None else tirx.Cast(_dtype(cast), value)

    def compared(node):
        a, b = wide(node.a), wide(node.b)
        return node if a is None or b is None else type(node)(a, b)

    def tested(call):
        value = wide(call.args[0]) if call.op.same_as(tvm.ir.Op.get("tirx.isnan")) else None
        return call if value is None else tirx.isnan(value)   # isinf, isfinite: comparisons by now
    return tvm_ffi.structural_map(expr, [(tirx.Cast, widened), (tvm.ir.Call, tested),
                                         *((kind, compared) for kind in _HALF_COMPARE)])


def _dtype(expr):
    return expr.ty.dtype if hasattr(expr, "ty") else expr.dtype


def _in_float32(expr):
    """The float32 of the bfloat16 expression `expr`, with no bfloat16 left in it: loads widened by
    their bits (a load of uint16 once TVM's storage pass retypes the buffer: exact, NaN and infinities
    kept), operations in float32 unrounded, as TVM's legalization computes bfloat16 outside `let`s (it
    rounds at bfloat16 stores, and a `let` value is never one; rounding on the bits in a `let` gave
    wrong lanes once vectorised: an argmin over axis 0 of exp); None where a part is unknown."""
    dtype = _dtype(expr)
    if str(dtype.with_lanes(1)) != "bfloat16":
        return tirx.Cast(as_f32(dtype), expr)   # a float32 or integer operand of a cast to bfloat16
    if isinstance(expr, tvm.ir.TensorLoad):
        lanes = "" if dtype.lanes == 1 else f"x{dtype.lanes}"
        bits = tirx.Cast(f"uint32{lanes}", tirx.reinterpret(f"uint16{lanes}", expr))
        sixteen = lanes_of(tirx.const(16, "uint32"), dtype.lanes)
        return tirx.reinterpret(as_f32(dtype), tirx.shift_left(bits, sixteen))
    if isinstance(expr, tirx.FloatImm):
        return tirx.const(expr.value, "float32")
    if isinstance(expr, tirx.Broadcast):
        value = _in_float32(expr.value)
        return None if value is None else tirx.Broadcast(value, expr.lanes)
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(as_f32(dtype), expr.value)
    if isinstance(expr, tirx.Select):
        sides = _in_float32(expr.true_value), _in_float32(expr.false_value)
        return None if None in sides else tirx.Select(expr.condition, *sides)
    if isinstance(expr, _HALF_ARITH):
        a, b = _in_float32(expr.a), _in_float32(expr.b)
        return None if a is None or b is None else type(expr)(a, b)
    if isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name.startswith("tirx."):
        halves = [str(_dtype(a).with_lanes(1)) == "bfloat16" for a in expr.args]
        args = [_in_float32(a) if half else a for a, half in zip(expr.args, halves)]
        if not any(halves) or None in args:
            return None   # not math on bfloat16 (a reinterpret of bits) or a part unknown
        return tvm.ir.Call(expr.op, args, ret_ty=str(as_f32(dtype)))
    return None


def _uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


_HALF_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
_HALF_COMPARE = (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE)


def half_math_in_float32(mod: tvm.IRModule, target: tvm.target.Target | None) -> tvm.IRModule:
    """Compute each float16 `+ - * / min max` and comparison of CPU kernels in float32, the result
    rounded back to float16: the same values (float32 holds every float16 result exactly before its
    one rounding), but x86 without AVX512-FP16 has no half vector arithmetic, and LLVM split a
    `<64 x half>` compare or subtract into scalar conversions (a float16 softmax ran 3x slower than
    its bfloat16 twin, which TVM already computes in float32); explicit casts are vector conversions.
    On a GPU only float16 and bfloat16 division and fmod: CUDA's division is a correctly rounded software
    routine, and torch's kernels divide in float32 too (a 4096-wide float16 softmax on the H100: 36.9 ->
    33.1 us); CUDA has no half fmod (TVM refused a float16 `%`), and float32's is exact for halves."""
    def widened(func):
        own = own_target(func, target)
        if own is None:
            return func
        if own.kind.name == "cuda":   # CUDA's half division is a correctly rounded software routine
            body = _half_calls_in_float32(func.body)
            return func.with_body(_half_math_in_float32(body, (tirx.Div, tirx.Mod), (), ("float16", "bfloat16")))
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
        if hasattr(expr, "ty") and not hasattr(expr.ty, "dtype"):
            return False   # a pointer (`buffer_data`: a buffer declared over another's memory)
        return str(dtype_of(expr).with_lanes(1)) in ("float16", "bfloat16")

    def widen(call):
        name = call.op.name.rsplit(".", 1)[-1] if isinstance(call.op, tvm.ir.Op) else None
        if name is None or not call.op.name.startswith("tirx.") or name in _CUDA_HALF_CALLS or not is_half(call) \
                or not call.args or not all(is_half(a) for a in call.args):
            return call   # not math on halves (a select, a reinterpret) or CUDA's own
        args = [tirx.Cast(as_f32(dtype_of(a)), a) for a in call.args]
        return tirx.Cast(dtype_of(call), tvm.ir.Call(call.op, args, ret_ty=str(as_f32(dtype_of(call)))))
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
        f32, u32 = as_f32(dtype), ("uint32" if dtype.lanes == 1 else f"uint32x{dtype.lanes}")
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
        return tirx.Cast(as_f32(dtype_of(expr)), expr)

    def arith(node):
        if not is_half(node.a):
            return node
        return tirx.Cast(dtype_of(node), type(node)(widen(node.a), widen(node.b)))

    def compare(node):
        return type(node)(widen(node.a), widen(node.b)) if is_half(node.a) else node
    return tvm_ffi.structural_map(body, [*((kind, arith) for kind in arithmetic),
                                         *((kind, compare) for kind in comparisons)])


def _bool_buffers_as_bytes(func: tirx.PrimFunc) -> tirx.PrimFunc:
    blocks = find_all(func.body, s_tir.SBlock)
    matched = [m.source.source for b in blocks for m in b.match_buffers]
    bools = [buf for b in blocks for buf in b.alloc_buffers if str(buf.ty.dtype) == "bool"
             and not any(buf.same_as(m) for m in matched)]  # a bool view of it would not match int8
    if not bools:
        return func
    fresh = {buf: tvm.ir.Var(buf.name, retype(buf.ty, dtype="int8")) for buf in bools}
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
