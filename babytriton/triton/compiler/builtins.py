"""The language's builtins, lowered: `BUILTINS` maps each builtin object of `tl` (core.py) to its
lowering, a function (compiler, call node, the call's arguments by name) -> value. A builtin absent
here is refused at the user's line."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as T

from .. import semantics
from ..language import core
from . import ops
from .values import Block, cast, const, converted, reshaped, scalar

Diagnostic = semantics.Diagnostic


def _block(value, what: str) -> Block:
    if not isinstance(value, Block):
        if isinstance(value, (bool, int, float)):
            return ops.as_block(value)
        raise Diagnostic(f"{what} must be a value of the kernel, got {value!r}")
    return value


# --- the programming model -------------------------------------------------------------------------

def program_id(c, node, axis):
    return scalar(core.int32, c.pids[semantics.program_axis(axis)])


def num_programs(c, node, axis):
    return scalar(core.int32, c.grid[semantics.program_axis(axis)])


# --- creating blocks -------------------------------------------------------------------------------

def arange(c, node, start, end):
    shape = semantics.arange(start, end)
    return Block(core.int32, shape, lambda index: index[0] + const(start, core.int32))


def full(c, node, shape, value, dtype):
    shape = semantics.block_shape(shape)
    if isinstance(value, Block):
        if value.shape:
            raise Diagnostic("tl.full's value must be a scalar")
        return Block(dtype, shape, lambda index: cast(value.at(()), dtype))
    return Block(dtype, shape, lambda index: const(value, dtype))


def zeros(c, node, shape, dtype):
    return full(c, node, shape, 0, dtype)


def zeros_like(c, node, input):
    x = _block(input, "tl.zeros_like's input")
    return Block(x.dtype, x.shape, lambda index: const(0, x.dtype))


# --- memory ----------------------------------------------------------------------------------------

def load(c, node, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    """The elements read into a buffer of the program (masked lanes read nothing: `other`, else 0)."""
    pointer = _block(pointer, "tl.load's pointer")
    mask = None if mask is None else ops.as_bool(mask)
    dtype, shape = semantics.load(pointer.dtype, pointer.shape, None if mask is None else mask.shape,
                                  other is not None)
    fill = ops.as_block(0 if other is None else other, dtype)
    buf = pointer.base

    def at(index):
        value = buf[pointer.element(index)]
        if mask is None:
            return value
        return tirx.if_then_else(mask.element(index), value, cast(fill.element(index), dtype))
    return c.emit.materialise(Block(dtype, shape, at), "load")


def store(c, node, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Each element written where the mask holds, converted to the pointer's element type."""
    pointer = _block(pointer, "tl.store's pointer")
    value = ops.as_block(value)
    mask = None if mask is None else ops.as_bool(mask)
    dtype = semantics.store(pointer.dtype, pointer.shape, value.shape, None if mask is None else mask.shape)
    buf = pointer.base
    with c.emit.block_loop(pointer.shape) as index:
        stored = cast(value.element(index), dtype)
        if mask is None:
            T.buffer_store(buf, stored, [pointer.element(index)])
        else:
            with T.If(mask.element(index)):
                with T.Then():
                    T.buffer_store(buf, stored, [pointer.element(index)])


def atomic_add(c, node, pointer, val, mask=None, sem=None, scope=None):
    """Add at each pointer atomically. The old values (Triton's result) are not kept: None."""
    pointer = _block(pointer, "tl.atomic_add's pointer")
    value = ops.as_block(val)
    dtype = semantics.atomic("add", pointer.dtype, value.dtype)
    mask = None if mask is None else ops.as_bool(mask)
    with c.emit.block_loop(pointer.shape, atomic=True) as index:
        add = (pointer.base, pointer.element(index), cast(value.element(index), dtype))
        if mask is None:
            c.emit.atomic_add(*add)
        else:
            with T.If(mask.element(index)):
                with T.Then():
                    c.emit.atomic_add(*add)


# --- shapes ----------------------------------------------------------------------------------------

def broadcast_to(c, node, input, *shape):
    x = _block(input, "tl.broadcast_to's input")
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    shape = semantics.broadcast_to(x.shape, tuple(shape))
    return Block(x.dtype, shape, lambda index: x.element(index), x.base)


def expand_dims(c, node, input, axis):
    x = _block(input, "tl.expand_dims's input")
    axes = sorted(a % (len(x.shape) + 1) for a in (axis if isinstance(axis, (tuple, list)) else [axis]))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshaped(x, tuple(shape), lambda index: tuple(i for pos, i in enumerate(index) if pos not in axes))


def reshape(c, node, input, *shape, can_reorder=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    return ops.reshape(_block(input, "tl.reshape's input"), tuple(shape))


def view(c, node, input, *shape):
    return reshape(c, node, input, *shape)


def trans(c, node, input, *dims):
    dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    return ops.transpose(_block(input, "tl.trans's input"), tuple(dims))


def cast_(c, node, input, dtype, fp_downcast_rounding=None, bitcast=False):
    x = ops.as_block(input)
    dtype = semantics.cast(x.dtype, dtype, bitcast)
    if bitcast:
        return Block(dtype, x.shape, lambda index: tirx.reinterpret(dtype.tvm, x.at(index)))
    return Block(dtype, x.shape, lambda index: cast(x.at(index), dtype))


# --- dot and reductions ----------------------------------------------------------------------------

def dot(c, node, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=core.float32):
    a, b = _block(input, "tl.dot's first operand"), _block(other, "tl.dot's second operand")
    acc = None if acc is None else _block(acc, "tl.dot's accumulator")
    dtype, shape = semantics.dot(a.dtype, b.dtype, a.shape, b.shape, None if acc is None else acc.dtype,
                                 None if acc is None else acc.shape, out_dtype)
    if len(shape) == 3:
        return _batched_dot(c, a, b, acc, dtype)
    into = c.assigning if c.assigning is not None and acc is not None and acc.buffer is not None and \
        acc.buffer.same_as(c.assigning) and acc.dtype == dtype else None
    return c.emit.dot(a, b, acc, dtype, dtype, into)


def _batched_dot(c, a: Block, b: Block, acc: Block | None, dtype: core.dtype) -> Block:
    """A rank-3 dot, a product per batch: each result element's sum over K a reduction nest (plain
    multiply-adds; tensor cores take rank 2), from operands computed once into buffers."""
    a, b = (x if x.buffer is not None else c.emit.materialise(x, name) for x, name in ((a, "dot_a"), (b, "dot_b")))
    (batches, m, k), n = a.shape, b.shape[2]
    products = Block(dtype, (batches, m, n, k), lambda i: cast(a.at((i[0], i[1], i[3])), dtype) * cast(
        b.at((i[0], i[3], i[2])), dtype))
    total = c.emit.reduce(products, 3, lambda x, y: x + y, const(0, dtype), dtype, "dot")
    return total if acc is None else Block(dtype, total.shape, lambda i: total.at(i) + cast(acc.element(i), dtype))


def _axes(x: Block, axis) -> list[int]:
    semantics.reduce_shape(x.shape, axis)
    return list(reversed(range(len(x.shape)))) if axis is None else [axis % len(x.shape)]


def _reduce(c, x: Block, axis, keep_dims, dtype, combine, init, prefix):
    result = ops.as_block(x)
    for a in _axes(x, axis):
        result = _along(result, a, lambda block, axis: c.emit.reduce(block, axis, combine, init, dtype, prefix))
    return _kept(result, x, axis) if keep_dims else result


def _along(x: Block, axis: int, reduction):
    """`reduction(block, axis)` of `x` along `axis`. Where the other axes have size 1 (a [1, N] row),
    `x` is reduced as its 1-D block to a scalar, which the schedules spread over threads or lanes (a
    nest over a one-element result would leave the work to one thread), then given its shape back."""
    if len(x.shape) < 2 or any(size != 1 for pos, size in enumerate(x.shape) if pos != axis):
        return reduction(x, axis)
    zero = tirx.IntImm("int32", 0)
    row = reshaped(x, (x.shape[axis],), lambda index: tuple(index[0] if pos == axis else zero
                                                             for pos in range(len(x.shape))))
    shape = x.shape[:axis] + x.shape[axis + 1:]
    out = reduction(row, 0)
    return tuple(reshaped(o, shape, lambda index: ()) for o in out) if isinstance(out, tuple) else \
        reshaped(out, shape, lambda index: ())


def _kept(result: Block, x: Block, axis) -> Block:
    """A reduction's result with its reduced axes kept, of size 1."""
    axes = _axes(x, axis)
    return reshaped(result, semantics.reduce_shape(x.shape, axis, True),
                    lambda index: tuple(i for pos, i in enumerate(index) if pos not in axes))


def sum_(c, node, input, axis=None, keep_dims=False, dtype=None):
    x = _block(input, "tl.sum's input")
    dtype = semantics.sum_dtype(x.dtype, dtype)
    return _reduce(c, x, axis, keep_dims, dtype, lambda acc, v: acc + v, const(0, dtype), "sum")


def _max_min(better, extreme):
    def lower(c, node, input, axis=None, return_indices=False, return_indices_tie_break_left=True,
              keep_dims=False):
        x = _block(input, "the reduction's input")
        dtype = semantics.max_min_dtype(x.dtype, return_indices)
        x = converted(x, dtype)
        if return_indices:
            return _arg(c, x, axis, keep_dims, better)
        return _reduce(c, x, axis, keep_dims, dtype, lambda acc, v: extreme(acc, v), _lowest(dtype, better),
                       "max" if better is tirx.GT else "min")
    return lower


def _lowest(dtype: core.dtype, better) -> tirx.PrimExpr:
    """The identity of max (or min): -inf (+inf) for floats, the type's min (max) for integers."""
    if dtype.is_floating():
        return const(float("-inf") if better is tirx.GT else float("inf"), dtype)
    return tirx.min_value(dtype.tvm) if better is tirx.GT else tirx.max_value(dtype.tvm)


def _arg(c, x: Block, axis, keep_dims, better):
    if axis is None:
        raise Diagnostic("argmax/argmin (and max/min with indices) need an axis")
    x = converted(x, semantics.max_min_dtype(x.dtype, return_indices=True))
    values, indices = _along(x, axis % len(x.shape), lambda block, a: c.emit.arg_reduce(
        block, a, better, _lowest(x.dtype, better), "arg"))
    return (_kept(values, x, axis), _kept(indices, x, axis)) if keep_dims else (values, indices)


def argmax(c, node, input, axis, tie_break_left=True, keep_dims=False):
    return _arg(c, _block(input, "tl.argmax's input"), axis, keep_dims, tirx.GT)[1]


def argmin(c, node, input, axis, tie_break_left=True, keep_dims=False):
    return _arg(c, _block(input, "tl.argmin's input"), axis, keep_dims, tirx.LT)[1]


# --- element-wise ----------------------------------------------------------------------------------

def where(c, node, condition, x, y):
    return ops.where(condition, x, y)


def _extreme(tir_fn):
    def lower(c, node, x, y, propagate_nan=None):
        both = ops.binary("+", x, y)   # the operands' common type and shape
        a, b = ops.as_block(x, both.dtype), ops.as_block(y, both.dtype)
        return Block(both.dtype, both.shape, lambda index: tir_fn(cast(a.element(index), both.dtype),
                                                                   cast(b.element(index), both.dtype)))
    return lower


def clamp(c, node, x, min, max, propagate_nan=None):
    return _extreme(tirx.min)(c, node, _extreme(tirx.max)(c, node, x, min), max)


def abs_(c, node, x):
    x = _block(x, "tl.abs's input")
    if x.dtype.is_int_unsigned() or x.dtype.is_bool():
        return x
    return Block(x.dtype, x.shape, lambda index: tirx.abs(x.at(index)))


def _math(name, fn):
    def lower(c, node, x):
        x = _block(x, f"tl.{name}'s input")
        dtype = semantics.math(name, x.dtype)
        return Block(dtype, x.shape, lambda index: fn(x.at(index)))
    return lower


def _sigmoid(v):
    one = tirx.const(1, str(v.ty.dtype))
    return one / (one + tirx.exp(-v))


def fma(c, node, x, y, z):
    return ops.binary("+", ops.binary("*", x, y), z)


def fdiv(c, node, x, y, ieee_rounding=False):
    return ops.binary("/", x, y)


def cdiv(c, node, x, div):
    if not isinstance(x, Block) and not isinstance(div, Block):
        return -(-x // div)
    return ops.binary("//", ops.binary("-", ops.binary("+", x, div), 1), div)


def _hint(c, node, input, values):
    return input   # multiple_of / max_contiguous / max_constancy: facts for Triton's vectoriser


def static_print(c, node, *values, sep=" ", end="\n", file=None, flush=False):
    print(*values, sep=sep, end=end)


def static_assert(c, node, cond, msg=""):
    if isinstance(cond, Block):
        raise Diagnostic("tl.static_assert takes a constexpr condition")
    if not cond:
        raise Diagnostic(f"static_assert failed: {msg}" if msg else "static_assert failed")


def device_assert(c, node, cond, msg="", mask=None):
    return None   # checked in interpret mode (BABYTRITON_INTERPRET=1); compiled kernels, as Triton's without debug


def debug_barrier(c, node):
    return None   # every block operation's buffers are synchronised where threads share them


BUILTINS = {
    core.program_id: program_id, core.num_programs: num_programs, core.arange: arange, core.full: full,
    core.zeros: zeros, core.zeros_like: zeros_like, core.load: load, core.store: store,
    core.atomic_add: atomic_add, core.broadcast_to: broadcast_to, core.expand_dims: expand_dims,
    core.reshape: reshape, core.view: view, core.trans: trans, core.cast: cast_, core.dot: dot,
    core.sum: sum_, core.max: _max_min(tirx.GT, tirx.max), core.min: _max_min(tirx.LT, tirx.min),
    core.argmax: argmax, core.argmin: argmin, core.where: where, core.maximum: _extreme(tirx.max),
    core.minimum: _extreme(tirx.min), core.clamp: clamp, core.abs: abs_,
    core.exp: _math("exp", tirx.exp), core.exp2: _math("exp2", tirx.exp2), core.log: _math("log", tirx.log),
    core.log2: _math("log2", tirx.log2), core.sqrt: _math("sqrt", tirx.sqrt), core.sqrt_rn: _math("sqrt_rn", tirx.sqrt),
    core.rsqrt: _math("rsqrt", tirx.rsqrt), core.sin: _math("sin", tirx.sin), core.cos: _math("cos", tirx.cos),
    core.erf: _math("erf", tirx.erf), core.floor: _math("floor", tirx.floor), core.ceil: _math("ceil", tirx.ceil),
    core.sigmoid: _math("sigmoid", _sigmoid), core.fma: fma, core.fdiv: fdiv, core.cdiv: cdiv,
    core.multiple_of: _hint, core.max_contiguous: _hint, core.max_constancy: _hint,
    core.static_print: static_print, core.static_assert: static_assert, core.device_assert: device_assert,
    core.debug_barrier: debug_barrier,
}
