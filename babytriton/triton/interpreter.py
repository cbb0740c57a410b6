"""Interpret mode (`BABYTRITON_INTERPRET=1`, as Triton's TRITON_INTERPRET): each program of the grid runs
the kernel's own Python function, in order, with the `tl` builtins bound to torch on the CPU. A block is a
torch tensor with a Triton dtype; a pointer block is int64 element offsets into a tensor argument's storage.
The typing rules are semantics.py's, so the interpreter is the oracle the compiled kernels answer to."""
from __future__ import annotations

import builtins
import itertools
import linecache
import operator
import traceback

import torch

from ..core.errors import CompilationError, Diagnostic, debug_enabled
from . import semantics
from .language import core as tl

_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")  # torch's CPU kernels lack them: held in int64


def holder(dtype: tl.dtype) -> torch.dtype:
    """The torch dtype the interpreter keeps values of `dtype` in."""
    return torch.int64 if dtype.is_ptr() or dtype.name in _WIDE_UNSIGNED else dtype.torch


def convert(data: torch.Tensor, src: tl.dtype, dst: tl.dtype) -> torch.Tensor:
    """Triton's conversion (semantic.py cast): floats to integers truncate, anything to int1 is `!= 0`,
    integers wrap to their width."""
    if dst.is_bool():
        return data != 0
    if src.is_floating() and dst.is_int():
        data = torch.nan_to_num(data.double(), nan=0.0).trunc().to(torch.int64)  # NaN: undefined in Triton
    out = data.to(holder(dst))
    if dst.name in _WIDE_UNSIGNED and dst.int_bitwidth < 64:
        out = out & (2 ** dst.int_bitwidth - 1)
    return out


class Pointee:
    """The memory a pointer block points into: a tensor argument's storage, flat, and the span of
    elements the argument covers (what a load or store may touch)."""

    def __init__(self, name: str, flat: torch.Tensor, lo: int, hi: int):
        self.name, self.flat, self.lo, self.hi = name, flat, lo, hi

    def check(self, offsets: torch.Tensor, what: str) -> None:
        bad = (offsets < self.lo) | (offsets > self.hi)
        if bool(bad.any()):
            first = int(offsets[bad][0])
            raise Diagnostic(f"out-of-bounds {what}: element {first - self.lo} of `{self.name}`, which has elements "
                             f"0..{self.hi - self.lo} (mask the access, or check the offsets)")


class Block(tl.tensor):
    """A block value of the interpreter: `data` (a torch tensor on the CPU) of Triton dtype `dtype`; a
    pointer block's data are element offsets into `pointee`."""

    __slots__ = ("data", "dtype", "pointee")

    def __init__(self, data: torch.Tensor, dtype: tl.dtype, pointee: Pointee | None = None):
        self.data, self.dtype, self.pointee = data, dtype, pointee

    @property
    def shape(self) -> list:
        return list(self.data.shape)

    @property
    def numel(self) -> int:
        return self.data.numel()

    @property
    def type(self):
        return self.dtype

    @property
    def T(self):
        return trans(self)

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        return cast(self, dtype, fp_downcast_rounding, bitcast)

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        for item in index:
            if not (item is None or isinstance(item, slice) and item == slice(None)):
                raise Diagnostic("a block is indexed only with `None` (a new axis) and `:`, as in x[:, None]")
        return Block(self.data[index], self.dtype, self.pointee)

    def __bool__(self):
        if self.data.numel() != 1 or self.data.dim() != 0:
            raise Diagnostic(f"the truth of a block of shape {self.shape} is ambiguous: reduce it, or use tl.where")
        return bool(self.data)

    def __index__(self):
        if self.data.dim() != 0 or not self.dtype.is_int():
            raise Diagnostic(f"an integer scalar is needed here, not a {self.dtype} block of shape {self.shape}")
        return int(self.data)

    def __int__(self):
        return self.__index__()

    def __neg__(self):
        semantics.unary("-", self.dtype)
        return Block(self.data if self.dtype.is_bool() else convert(-self.data, self.dtype, self.dtype), self.dtype)

    def __pos__(self):
        return self

    def __abs__(self):
        return _BUILTINS["abs"](self)

    def __invert__(self):
        semantics.unary("~", self.dtype)
        return Block(convert(~self.data, self.dtype, self.dtype), self.dtype)

    def __getattr__(self, name):
        # Triton's tensor methods (x.sum(axis=0), x.exp(), ...): the builtin with the block first
        if name in _MEMBERS:
            return lambda *args, **kwargs: _BUILTINS[name](self, *args, **kwargs)
        raise AttributeError(f"a block has no attribute {name!r}")

    def __repr__(self):
        return f"Block({self.dtype}, {self.shape}, {self.data.tolist()})"


def block(value) -> Block:
    """A Block of a Block, or of a Python scalar (a 0-d block of its dtype in semantics.scalar_dtype)."""
    value = tl.unwrap(value)
    if isinstance(value, Block):
        return value
    if isinstance(value, (bool, int, float)):
        dtype = semantics.scalar_dtype(value)
        return Block(torch.tensor(value, dtype=holder(dtype)), dtype)
    raise Diagnostic(f"expected a block or a number, got {type(value).__name__}")


def _scalar(value):
    """The Python value of a Python-scalar operand (which does not widen a block of its kind), else None."""
    value = tl.unwrap(value)
    return value if isinstance(value, (bool, int, float)) else None


def _int_division(fn):
    """Integer `//` and `%` with a zero divisor: undefined in Triton; here the lane gives 0, not a trap."""
    def run(x, y):
        if x.is_floating_point():
            return fn(x, y)
        zero = y == 0
        return torch.where(zero, torch.zeros_like(x), fn(x, torch.where(zero, torch.ones_like(y), y)))
    return run


_TORCH_BINARY = {
    "+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div,
    "//": _int_division(lambda x, y: torch.div(x, y, rounding_mode="trunc")),   # C's quotient
    "%": _int_division(torch.fmod),                                             # C's remainder
    "&": torch.bitwise_and, "|": torch.bitwise_or, "^": torch.bitwise_xor,
    "<<": torch.bitwise_left_shift, ">>": torch.bitwise_right_shift,
    "==": torch.eq, "!=": torch.ne, "<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge,
    "maximum": lambda x, y: torch.fmax(x, y) if x.is_floating_point() else torch.maximum(x, y),
    "minimum": lambda x, y: torch.fmin(x, y) if x.is_floating_point() else torch.minimum(x, y),
}


def binary(op: str, a, b) -> Block:
    """`a <op> b` by semantics.binary's rule: operands cast to one dtype, broadcast, computed by torch."""
    x, y = block(a), block(b)
    rule = semantics.binary(op, x.dtype, y.dtype, _scalar(a), _scalar(b))
    semantics.broadcast_shapes(x.shape, y.shape)
    if rule.operand is None:  # pointer arithmetic: offsets move, in elements
        ptr, off = (x, y) if x.dtype.is_ptr() else (y, x)
        moved = torch.add(ptr.data, off.data.to(torch.int64), alpha=1 if op == "+" else -1)
        return Block(moved, rule.result, ptr.pointee)
    lhs, rhs = convert(x.data, x.dtype, rule.operand), convert(y.data, y.dtype, rule.operand)
    if op == ">>" and semantics.shift_right_kind(rule.operand) == "logical" and rule.operand.int_bitwidth == 64:
        lhs = lhs.view(torch.uint64)  # a 64-bit logical shift: no sign to fill
    out = _TORCH_BINARY[op](lhs, rhs)
    return Block(convert(out.view(torch.int64) if out.dtype == torch.uint64 else out, rule.operand, rule.result),
                 rule.result)


def _install_operators():
    """Block's Python operators, each a `binary` of its symbol (reflected ones with operands swapped)."""
    names = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "&": "and",
             "|": "or", "^": "xor", "<<": "lshift", ">>": "rshift"}
    for op, name in names.items():
        setattr(Block, f"__{name}__", lambda self, other, op=op: binary(op, self, other))
        setattr(Block, f"__r{name}__", lambda self, other, op=op: binary(op, other, self))
    compare = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
    for op, name in compare.items():
        setattr(Block, f"__{name}__", lambda self, other, op=op: binary(op, self, other))
    Block.__hash__ = object.__hash__


_install_operators()


# --- the builtins -----------------------------------------------------------------------------------

_BUILTINS: dict = {}
_MEMBERS = ("sum", "max", "min", "argmax", "argmin", "reshape", "view", "trans", "broadcast_to", "expand_dims",
            "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs", "sigmoid", "erf", "floor", "ceil",
            "cast")


def implements(*builtins_):
    """Register a function as the interpreter's implementation of the given tl builtins."""
    def register(fn):
        for b in builtins_:
            _BUILTINS[b.__name__] = fn
        return fn
    return register


@implements(tl.arange)
def arange(start, end):
    (n,) = semantics.arange(start, end)
    start = tl.unwrap(start)
    return Block(torch.arange(start, start + n, dtype=torch.int32), tl.int32)


@implements(tl.full)
def full(shape, value, dtype):
    shape = semantics.block_shape(shape)
    value = block(value)
    data = convert(value.data, value.dtype, tl.unwrap(dtype)).expand(shape).clone()
    return Block(data, tl.unwrap(dtype))


@implements(tl.zeros)
def zeros(shape, dtype):
    return full(shape, 0, dtype)


@implements(tl.zeros_like)
def zeros_like(input):
    return Block(torch.zeros_like(input.data), input.dtype)


@implements(tl.cast)
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    x, dtype = block(input), tl.unwrap(dtype)
    semantics.cast(x.dtype, dtype, bitcast)
    if bitcast and x.dtype != dtype and not (x.dtype.is_ptr() or dtype.is_ptr()):
        return Block(_bitcast(x.data, x.dtype, dtype), dtype)
    if bitcast and x.dtype != dtype:
        return Block(x.data.view(holder(dtype)), dtype)
    if x.dtype.is_ptr():
        return Block(x.data.clone(), dtype, x.pointee if dtype.is_ptr() else None)
    return Block(convert(x.data, x.dtype, dtype), dtype)


_SIGNED = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


def _bitcast(data: torch.Tensor, src: tl.dtype, dst: tl.dtype) -> torch.Tensor:
    """The bits of `data` (of `src`) read as `dst`, of the same width: through the signed integer of
    that width, as the wide unsigned types are held in int64 (a view of those would read 64 bits)."""
    bits = src.primitive_bitwidth
    if src.name in _WIDE_UNSIGNED and bits < 64:   # [0, 2**bits) to the same bits as a signed integer
        data = (data + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)
    raw = data.to(_SIGNED[bits]) if src.name in _WIDE_UNSIGNED else data.view(_SIGNED[bits])
    return convert(raw, tl.int64, dst) if dst.name in _WIDE_UNSIGNED else raw.view(dst.torch)


def _broadcast(x: Block, shape) -> torch.Tensor:
    return x.data.expand(semantics.broadcast_to(x.shape, shape)) if shape else x.data


@implements(tl.load)
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    ptr = block(pointer)
    masks = block(mask) if mask is not None else None
    dtype, shape = semantics.load(ptr.dtype, tuple(ptr.shape), None if masks is None else tuple(masks.shape),
                                  other is not None)
    # mask and other broadcast with the pointer as operands do (semantic.py _load_legacy), ranks lifted
    offsets = ptr.data.expand(shape).reshape(-1)
    active = masks.data.expand(shape).reshape(-1).bool() if masks is not None else torch.ones_like(offsets, dtype=bool)
    ptr.pointee.check(offsets[active], "tl.load")
    flat = ptr.pointee.flat
    safe = torch.where(active, offsets, torch.full_like(offsets, ptr.pointee.lo))
    values = convert(flat[safe], dtype, dtype) if flat.numel() else torch.zeros(offsets.shape, dtype=holder(dtype))
    fill = block(other if other is not None else 0)
    semantics.broadcast_to(semantics.broadcast_shapes(fill.shape, shape), shape)
    fill = convert(fill.data.expand(shape).reshape(-1), fill.dtype, dtype)
    return Block(torch.where(active, values, fill).reshape(shape), dtype)


def _target(pointer, value, mask):
    """A store's or an atomic's pointer block, flat offsets, values (cast to the element type) and
    active lanes, all of the pointer's shape."""
    ptr, val = block(pointer), block(value)
    masks = block(mask) if mask is not None else None
    dtype = semantics.store(ptr.dtype, tuple(ptr.shape), tuple(val.shape),
                            None if masks is None else tuple(masks.shape))
    shape = tuple(ptr.shape)
    offsets = ptr.data.reshape(-1)
    values = convert(_broadcast(val, shape).reshape(-1), val.dtype, dtype)
    active = _broadcast(masks, shape).reshape(-1).bool() if masks is not None else torch.ones_like(offsets, dtype=bool)
    return ptr, offsets, values, active


@implements(tl.store)
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    ptr, offsets, values, active = _target(pointer, value, mask)
    ptr.pointee.check(offsets[active], "tl.store")
    ptr.pointee.flat[offsets[active]] = values[active].to(ptr.pointee.flat.dtype)


_SCATTER = {"max": "amax", "min": "amin"}


def _atomic(kind: str):
    """tl.atomic_<kind>: the programs run one at a time, so a scatter (duplicates combined) is atomic;
    the result is each lane's old value (lanes hitting one element all see the value before the call)."""
    def run(pointer, val, mask=None, sem=None, scope=None):
        semantics.atomic(kind, block(pointer).dtype, block(val).dtype)
        ptr, offsets, values, active = _target(pointer, val, mask)
        ptr.pointee.check(offsets[active], f"tl.atomic_{kind}")
        flat = ptr.pointee.flat
        dtype = ptr.dtype.element_ty
        old = torch.zeros(offsets.shape, dtype=holder(dtype))
        old[active] = flat[offsets[active]].to(old.dtype)
        update = values[active].to(flat.dtype)
        if kind == "add":
            flat.index_add_(0, offsets[active], update)
        else:
            flat.scatter_reduce_(0, offsets[active], update, _SCATTER[kind])
        return Block(old.reshape(ptr.data.shape), dtype)
    return run


for _kind in ("add", "max", "min"):
    _BUILTINS[f"atomic_{_kind}"] = _atomic(_kind)


@implements(tl.dot)
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=tl.float32):
    a, b = block(input), block(other)
    accb = block(acc) if acc is not None else None
    dtype, shape = semantics.dot(a.dtype, b.dtype, tuple(a.shape), tuple(b.shape),
                                 None if accb is None else accb.dtype, None if accb is None else tuple(accb.shape),
                                 tl.unwrap(out_dtype))
    wide = torch.float64 if dtype == tl.float64 else torch.int64 if dtype.is_int() else torch.float32
    # fp16/bf16 products are exact in fp32; fp32 inputs are multiplied exactly too, where Triton on a GPU
    # rounds them to tf32 unless input_precision="ieee" (as Triton's own interpreter, this is the ieee answer)
    out = torch.matmul(a.data.to(wide), b.data.to(wide))
    if accb is not None:
        out = out + accb.data.to(wide)
    return Block(convert(out, dtype, dtype), dtype)


def _reduce_input(input, axis):
    x = block(input)
    axis = tl.unwrap(axis)
    semantics.reduce_shape(tuple(x.shape), axis)
    return x, axis


@implements(tl.sum)
def sum(input, axis=None, keep_dims=False, dtype=None):
    x, axis = _reduce_input(input, axis)
    out_dtype = semantics.sum_dtype(x.dtype, tl.unwrap(dtype))
    data = convert(x.data, x.dtype, out_dtype)
    dims = tuple(builtins.range(x.data.dim())) if axis is None else axis
    out = data.sum(dim=dims, keepdim=bool(keep_dims)) if x.data.dim() else data
    return Block(convert(out, out_dtype, out_dtype), out_dtype)


def _extremum(data: torch.Tensor, dim: int, largest: bool, keep: bool, first: bool):
    """The max/min of `data` along `dim` and its index (the first on ties, or the last), NaN ignored
    as Triton's maxnum/minnum combine does (NaN only where a whole slice is NaN)."""
    nan = data.isnan() if data.is_floating_point() else None
    if nan is not None:
        data = torch.where(nan, torch.tensor(-float("inf") if largest else float("inf"), dtype=data.dtype), data)
    seen = data if first else data.flip(dim)
    values, indices = (torch.max if largest else torch.min)(seen, dim=dim, keepdim=keep)
    if not first:
        indices = data.shape[dim] - 1 - indices
    if nan is not None:
        values = torch.where(nan.all(dim=dim, keepdim=keep), torch.tensor(float("nan"), dtype=data.dtype), values)
    return values, indices


def _extreme(largest: bool):
    """tl.max / tl.min, with indices when asked (standard.py's dtypes: semantics.max_min_dtype)."""
    def run(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        x, axis = _reduce_input(input, axis)
        dtype = semantics.max_min_dtype(x.dtype, bool(return_indices))
        shape = semantics.reduce_shape(tuple(x.shape), axis, bool(keep_dims))
        data = convert(x.data, x.dtype, dtype)
        dim = 0 if axis is None or data.dim() == 0 else axis % data.dim()
        data = data.reshape(-1) if axis is None or data.dim() == 0 else data
        values, indices = _extremum(data, dim, largest, bool(keep_dims), bool(return_indices_tie_break_left))
        result = Block(values.reshape(shape), dtype)
        if not return_indices:
            return result
        return result, Block(indices.reshape(shape).to(torch.int32), semantics.INDEX_DTYPE)
    return run


_BUILTINS["max"], _BUILTINS["min"] = _extreme(True), _extreme(False)


@implements(tl.argmax)
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    return _BUILTINS["max"](input, axis, True, tie_break_left, keep_dims)[1]


@implements(tl.argmin)
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    return _BUILTINS["min"](input, axis, True, tie_break_left, keep_dims)[1]


@implements(tl.where)
def where(condition, x, y):
    cond, xb, yb = block(condition), block(x), block(y)
    dtype, shape = semantics.where(tuple(cond.shape), xb.dtype, yb.dtype, _scalar(x), _scalar(y), tuple(xb.shape),
                                   tuple(yb.shape))
    out = torch.where(convert(cond.data, cond.dtype, tl.int1), convert(xb.data, xb.dtype, dtype),
                      convert(yb.data, yb.dtype, dtype))
    pointee = xb.pointee if dtype.is_ptr() else None
    return Block(out.expand(shape) if shape else out, dtype, pointee)


@implements(tl.maximum)
def maximum(x, y, propagate_nan=None):
    return binary("maximum", x, y)


@implements(tl.minimum)
def minimum(x, y, propagate_nan=None):
    return binary("minimum", x, y)


@implements(tl.clamp)
def clamp(x, min, max, propagate_nan=None):
    return minimum(maximum(x, min), max)


@implements(tl.fma)
def fma(x, y, z):
    return binary("+", binary("*", x, y), z)


@implements(tl.fdiv)
def fdiv(x, y, ieee_rounding=False):
    return binary("/", x, y)


@implements(tl.cdiv)
def cdiv(x, div):
    if isinstance(tl.unwrap(x), int) and isinstance(tl.unwrap(div), int):
        return (tl.unwrap(x) + tl.unwrap(div) - 1) // tl.unwrap(div)
    return binary("//", binary("-", binary("+", x, div), 1), div)


@implements(tl.umulhi)
def umulhi(x, y):
    xb, yb = block(x), block(y)
    dtype = semantics.binary("*", xb.dtype, yb.dtype, _scalar(x), _scalar(y)).result
    bits = dtype.int_bitwidth
    wide = convert(xb.data, xb.dtype, dtype).to(torch.int64) * convert(yb.data, yb.dtype, dtype).to(torch.int64)
    return Block(convert(wide >> bits, tl.int64, dtype), dtype)


_MATH = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
         "sqrt_rn": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf,
         "floor": torch.floor, "ceil": torch.ceil, "sigmoid": torch.sigmoid, "abs": torch.abs}


def _math(name: str):
    def run(x):
        xb = block(x)
        dtype = semantics.math(name, xb.dtype)
        return Block(_MATH[name](xb.data) if not xb.dtype.is_bool() else xb.data, dtype)
    run.__name__ = name
    return run


for _name in _MATH:
    _BUILTINS[_name] = _math(_name)


@implements(tl.broadcast_to)
def broadcast_to(input, *shape):
    x = block(input)
    shape = tuple(tl.unwrap(d) for d in (shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple))
                                         else shape))
    return Block(x.data.expand(semantics.broadcast_to(tuple(x.shape), shape)), x.dtype, x.pointee)


@implements(tl.expand_dims)
def expand_dims(input, axis):
    x = block(input)
    return Block(x.data.unsqueeze(tl.unwrap(axis)), x.dtype, x.pointee)


@implements(tl.reshape, tl.view)
def reshape(input, *shape, can_reorder=False):
    x = block(input)
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
    shape = semantics.block_shape(shape) if shape else ()
    if torch.Size(shape).numel() != x.numel:
        raise Diagnostic(f"cannot reshape a block of shape {x.shape} to {list(shape)}")
    return Block(x.data.reshape(shape), x.dtype, x.pointee)


@implements(tl.trans)
def trans(input, *dims):
    x = block(input)
    dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
    order = [tl.unwrap(d) for d in dims] or list(builtins.range(x.data.dim()))[::-1]
    return Block(x.data.permute(order), x.dtype, x.pointee)


@implements(tl.multiple_of, tl.max_contiguous, tl.max_constancy)
def hint(input, values):
    return input


@implements(tl.range)
def loop_range(arg1, arg2=None, step=None, **hints):
    bounds = [arg1] + ([arg2] if arg2 is not None else []) + ([step] if step is not None else [])
    return builtins.range(*(operator.index(tl.unwrap(b)) for b in bounds))


@implements(tl.static_range)
def static_range(arg1, arg2=None, step=None):
    if any(isinstance(b, Block) for b in (arg1, arg2, step)):
        raise Diagnostic("tl.static_range's bounds must be constexprs (it is unrolled); use range or tl.range")
    return loop_range(arg1, arg2, step)


@implements(tl.debug_barrier)
def debug_barrier():
    return None


@implements(tl.static_print)
def static_print(*values, sep=" ", end="\n", file=None, flush=False):
    builtins.print(*values, sep=sep, end=end, file=file, flush=flush)


@implements(tl.static_assert)
def static_assert(cond, msg=""):
    if not tl.unwrap(cond):
        raise Diagnostic(f"static_assert failed: {msg}" if msg else "static_assert failed")


@implements(tl.device_assert)
def device_assert(cond, msg="", mask=None):
    c = block(cond).data.bool()
    if mask is not None:
        c = c | ~block(mask).data.bool()
    if not bool(c.all()):
        raise Diagnostic(f"device_assert failed: {msg}" if msg else "device_assert failed")


class Program:
    """One program of the grid: what tl.program_id/num_programs/print answer; every other builtin is
    the interpreter's function of the same name."""

    def __init__(self, pid: tuple, grid: tuple):
        self.pid, self.grid = pid, grid

    def program_id(self, axis):
        return Block(torch.tensor(self.pid[semantics.program_axis(axis)], dtype=torch.int32), tl.int32)

    def num_programs(self, axis):
        return Block(torch.tensor(self.grid[semantics.program_axis(axis)], dtype=torch.int32), tl.int32)

    def device_print(self, prefix, *args, hex=False):
        shown = [a.data.tolist() if isinstance(a, Block) else a for a in args]
        builtins.print(f"pid {self.pid} {prefix}", *shown, flush=True)

    def __getattr__(self, name):
        try:
            return _BUILTINS[name]
        except KeyError:
            raise Diagnostic(f"tl.{name} is not supported by the interpreter") from None


# --- running a kernel -------------------------------------------------------------------------------

class Memory:
    """The tensor arguments' storages, flat, on the CPU: one per storage (arguments that alias share
    it); CUDA storages are copied here for the run and back after it."""

    def __init__(self):
        self._flats: dict = {}

    def pointer(self, name: str, t: torch.Tensor) -> Block:
        dtype = tl.from_torch(t.dtype)
        key = (t.untyped_storage().data_ptr(), t.device, t.dtype)
        if key not in self._flats:
            n = t.untyped_storage().nbytes() // t.element_size()
            device_flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
            self._flats[key] = (device_flat, device_flat.cpu() if device_flat.device.type != "cpu" else device_flat)
        flat = self._flats[key][1]
        lo = t.storage_offset()
        hi = lo + builtins.sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else lo - 1
        return Block(torch.tensor(lo, dtype=torch.int64), tl.pointer_type(dtype), Pointee(name, flat, lo, hi))

    def write_back(self) -> None:
        for device_flat, host_flat in self._flats.values():
            if device_flat is not host_flat:
                device_flat.copy_(host_flat)


def _argument(memory: Memory, name: str, value):
    """A runtime argument as the kernel sees it: tensors are pointers, numbers blocks of
    semantics.argument_dtype (jit.py has checked there is nothing else)."""
    if isinstance(value, torch.Tensor):
        return memory.pointer(name, value)
    if isinstance(value, (bool, int, float)):
        dtype = semantics.argument_dtype(value)
        bits = value - 2 ** 64 if dtype == tl.uint64 else value  # a uint64 is held as int64's bits
        return Block(torch.tensor(bits, dtype=holder(dtype)), dtype)
    return value


def run(fn, grid: tuple, runtime: dict, constants: dict, kernel_codes: set) -> None:
    """Run `fn` (the kernel's Python function) once per program of `grid` (x fastest), the runtime
    arguments converted to blocks and the constexprs as they are; errors name the user's line."""
    memory = Memory()
    args = {name: _argument(memory, name, value) for name, value in runtime.items()}
    args.update(constants)
    gx, gy, gz = grid
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # blocks are small: a thread pool's wake-ups would cost more than they save
    try:
        for z, y, x in itertools.product(builtins.range(gz), builtins.range(gy), builtins.range(gx)):
            program = Program((x, y, z), grid)
            try:
                with tl.implementation(program):
                    fn(**args)
            except CompilationError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure becomes one error at the user's line
                raise located(exc, kernel_codes, program.pid) from (exc if debug_enabled() else None)
    finally:
        torch.set_num_threads(threads)
        memory.write_back()


def located(exc: BaseException, kernel_codes: set, pid: tuple) -> CompilationError:
    """`exc`, raised while a program ran, as a CompilationError at the innermost line of a @triton.jit
    function in its traceback."""
    message = str(exc) if isinstance(exc, Diagnostic) else f"{type(exc).__name__}: {exc}"
    message = f"{message} (in program {pid})"
    frames = [f for f, tb in zip(traceback.extract_tb(exc.__traceback__), _tb_codes(exc.__traceback__))
              if tb in kernel_codes]
    if not frames:
        return CompilationError(message, "<kernel>")
    frame = frames[-1]
    line = linecache.getline(frame.filename, frame.lineno) or None
    return CompilationError(message, frame.filename, frame.lineno, frame.colno, line,
                            frame.end_colno if frame.end_lineno == frame.lineno else None)


def _tb_codes(tb):
    while tb is not None:
        yield tb.tb_frame.f_code
        tb = tb.tb_next

