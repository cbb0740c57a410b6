"""Triton's language as objects: its dtypes, `constexpr`, and every builtin (`tl.load`, `tl.dot`, ...).

A builtin is a plain function marked `__triton_builtin__`; calling it forwards to the implementation
active on this thread (the interpreter's, while it runs a program). The compiler never calls them: it
recognises a call by the identity of the function object the name resolves to (`tl.load is load`)."""
from __future__ import annotations

import builtins as _py
import contextlib
import functools
import operator
import threading

import torch


class dtype:
    """A scalar type of the language: Triton's short name ('fp32'), TVM's dtype string, torch's dtype."""

    def __init__(self, name: str, tvm: str, torch_dtype: torch.dtype, kind: str, bits: int):
        self.name = name              # Triton's name: 'fp32', 'bf16', 'int32', 'uint8', 'int1'
        self.tvm = tvm                # TVM's: 'float32', 'bfloat16', 'int32', 'uint8', 'bool'
        self.torch = torch_dtype
        self.kind = kind              # 'bool' | 'int' | 'uint' | 'float'
        self.primitive_bitwidth = bits

    def is_floating(self) -> bool:
        return self.kind == "float"

    def is_int(self) -> bool:
        """Every integer type, int1 (the booleans) included, as in Triton."""
        return self.kind in ("bool", "int", "uint")

    def is_int_signed(self) -> bool:
        return self.kind == "int"

    def is_int_unsigned(self) -> bool:
        """Triton counts int1 as unsigned (dtype.UINT_TYPES in triton/language/core.py lists it)."""
        return self.kind in ("bool", "uint")

    def is_bool(self) -> bool:
        return self.kind == "bool"

    def is_ptr(self) -> bool:
        return False

    @property
    def int_bitwidth(self) -> int:
        return self.primitive_bitwidth if self.is_int() else 0

    @property
    def scalar(self) -> dtype:
        return self

    def __eq__(self, other) -> bool:
        return isinstance(other, dtype) and not isinstance(other, pointer_type) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"triton.language.{_LONG_NAMES.get(self.name, self.name)}"

    def __str__(self) -> str:
        return self.name


class pointer_type(dtype):
    """The type of a pointer to `element_ty` (a tensor argument is one: a pointer to its first element)."""

    def __init__(self, element_ty: dtype, address_space: int = 1):
        super().__init__(f"*{element_ty.name}", "handle", torch.int64, "ptr", 64)
        self.element_ty = element_ty
        self.address_space = address_space

    def is_ptr(self) -> bool:
        return True

    def __eq__(self, other) -> bool:
        return isinstance(other, pointer_type) and other.element_ty == self.element_ty

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"pointer<{self.element_ty.name}>"


int1 = dtype("int1", "bool", torch.bool, "bool", 1)
int8 = dtype("int8", "int8", torch.int8, "int", 8)
int16 = dtype("int16", "int16", torch.int16, "int", 16)
int32 = dtype("int32", "int32", torch.int32, "int", 32)
int64 = dtype("int64", "int64", torch.int64, "int", 64)
uint8 = dtype("uint8", "uint8", torch.uint8, "uint", 8)
uint16 = dtype("uint16", "uint16", torch.uint16, "uint", 16)
uint32 = dtype("uint32", "uint32", torch.uint32, "uint", 32)
uint64 = dtype("uint64", "uint64", torch.uint64, "uint", 64)
float16 = dtype("fp16", "float16", torch.float16, "float", 16)
bfloat16 = dtype("bf16", "bfloat16", torch.bfloat16, "float", 16)
float32 = dtype("fp32", "float32", torch.float32, "float", 32)
float64 = dtype("fp64", "float64", torch.float64, "float", 64)

DTYPES = (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64)
_LONG_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}
_BY_TORCH = {d.torch: d for d in DTYPES}


def from_torch(torch_dtype: torch.dtype) -> dtype:
    """The language's dtype of a torch dtype; a ValueError names the ones the language lacks."""
    try:
        return _BY_TORCH[torch_dtype]
    except KeyError:
        names = ", ".join(str(d.torch).removeprefix("torch.") for d in DTYPES)
        raise ValueError(f"tensors of {torch_dtype} cannot be kernel arguments (the language has {names})") from None


class constexpr:
    """A value known when the kernel is specialised (`BLOCK: tl.constexpr`): the annotation of a
    meta-parameter, and a wrapper that `value` unwraps."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"

    def __eq__(self, other) -> bool:
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __index__(self) -> int:
        return _py.int(self.value.__index__())


def _constexpr_operator(op, reflected: bool = False):
    """Python's `op` on constexprs (Triton's constexpr does arithmetic too, so a global
    `GROUP = tl.constexpr(8)` serves host code and kernels alike): constexpr in, constexpr out; a block
    value operand gives its own result."""
    def method(self, other=None):
        a, b = (unwrap(other), self.value) if reflected else (self.value, unwrap(other))
        result = op(a) if other is None and op in _UNARY else op(a, b)
        return result if isinstance(result, tensor) else constexpr(result)
    return method


_UNARY = {operator.neg, operator.pos, operator.invert, operator.abs}
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and", "or", "xor"):
    _op = getattr(operator, f"{_name}_" if _name in ("and", "or") else _name)
    setattr(constexpr, f"__{_name}__", _constexpr_operator(_op))
    setattr(constexpr, f"__r{_name}__", _constexpr_operator(_op, reflected=True))
for _name in ("lt", "le", "gt", "ge", "ne"):
    setattr(constexpr, f"__{_name}__", _constexpr_operator(getattr(operator, _name)))
for _op in _UNARY:
    setattr(constexpr, f"__{_op.__name__}__", _constexpr_operator(_op))


def unwrap(value):
    """A constexpr's value, anything else as it is."""
    return value.value if isinstance(value, constexpr) else value


class tensor:
    """The base class of block values; each implementation (the interpreter) subclasses it."""


# --- dispatch ---------------------------------------------------------------------------------------

_active = threading.local()


@contextlib.contextmanager
def implementation(impl):
    """Make `impl` run the builtins on this thread for the `with` block (one program of a kernel)."""
    saved = getattr(_active, "impl", None)
    _active.impl = impl
    try:
        yield impl
    finally:
        _active.impl = saved


def active_implementation():
    """The implementation running builtins on this thread (None outside a running program)."""
    return getattr(_active, "impl", None)


def builtin(fn):
    """Mark `fn` a builtin of the language; its signature and docstring are Triton's, its body is
    the active implementation's method of the same name."""
    name = fn.__name__

    @functools.wraps(fn)
    def dispatch(*args, **kwargs):
        impl = getattr(_active, "impl", None)
        if impl is None:
            raise RuntimeError(f"tl.{name} can only be called inside a @triton.jit kernel (launched with "
                               "kernel[grid](...)), not from plain Python")
        return getattr(impl, name)(*args, **kwargs)

    dispatch.__triton_builtin__ = True
    return dispatch


def is_builtin(obj) -> bool:
    return getattr(obj, "__triton_builtin__", False) is True


def is_jit_function(obj) -> bool:
    """Whether `obj` is a `@triton.jit` function (the compiler inlines its calls; jit.py marks them)."""
    return getattr(obj, "__triton_jit__", False) is True


# --- the programming model --------------------------------------------------------------------------

@builtin
def program_id(axis):
    """The index of this program along `axis` (0, 1 or 2) of the grid, an int32 scalar."""


@builtin
def num_programs(axis):
    """The number of programs along `axis` of the grid, an int32 scalar."""


# --- creating blocks --------------------------------------------------------------------------------

@builtin
def arange(start, end):
    """The int32 block `[start, start + 1, ..., end - 1]`; `end - start` a power of two (constexprs)."""


@builtin
def zeros(shape, dtype):
    """A block of `shape` (constexprs) filled with zeros of `dtype`."""


@builtin
def full(shape, value, dtype):
    """A block of `shape` filled with the scalar `value` cast to `dtype`."""


@builtin
def zeros_like(input):
    """A block of zeros with `input`'s shape and dtype."""


# --- memory -----------------------------------------------------------------------------------------

@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
         eviction_policy="", volatile=False):
    """The values at a pointer (block); where `mask` is false nothing is read and `other` is the value."""


@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    """Write `value` (cast to the pointer's element type) where `mask` is true."""


@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None):
    """Add `val` at the pointers atomically; the old values are the result."""


@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None):
    """Store max(old, val) at the pointers atomically; the old values are the result."""


@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None):
    """Store min(old, val) at the pointers atomically; the old values are the result."""


# --- shapes -----------------------------------------------------------------------------------------

@builtin
def broadcast_to(input, *shape):
    """`input` broadcast to `shape`."""


@builtin
def expand_dims(input, axis):
    """`input` with a new axis of length 1 at `axis`."""


@builtin
def reshape(input, *shape, can_reorder=False):
    """`input`'s elements in a block of `shape`."""


@builtin
def view(input, *shape):
    """`input` seen with `shape` (as reshape)."""


@builtin
def trans(input, *dims):
    """`input` with its axes permuted (two axes: swapped)."""


# --- types ------------------------------------------------------------------------------------------

@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    """`input` converted to `dtype` (as `input.to(dtype)`)."""


# --- linear algebra ---------------------------------------------------------------------------------

@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
        out_dtype=float32):
    """The matrix product of two blocks (M x K and K x N), added to `acc`; fp16/bf16 accumulate in fp32."""


# --- reductions -------------------------------------------------------------------------------------

@builtin
def sum(input, axis=None, keep_dims=False, dtype=None):
    """The sum along `axis` (all axes when None); small integers and booleans sum in int32."""


@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """The maximum along `axis` (and its index with `return_indices`)."""


@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    """The minimum along `axis` (and its index with `return_indices`)."""


@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False):
    """The int32 index of the maximum along `axis`."""


@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False):
    """The int32 index of the minimum along `axis`."""


# --- elementwise ------------------------------------------------------------------------------------

@builtin
def where(condition, x, y):
    """`x` where `condition` is true, else `y` (broadcast together)."""


@builtin
def maximum(x, y, propagate_nan=None):
    """The elementwise maximum."""


@builtin
def minimum(x, y, propagate_nan=None):
    """The elementwise minimum."""


@builtin
def clamp(x, min, max, propagate_nan=None):
    """`x` clamped to [min, max]."""


@builtin
def abs(x):
    """The absolute value."""


@builtin
def exp(x):
    """e ** x (fp32/fp64)."""


@builtin
def exp2(x):
    """2 ** x (fp32/fp64)."""


@builtin
def log(x):
    """The natural logarithm (fp32/fp64)."""


@builtin
def log2(x):
    """The base-2 logarithm (fp32/fp64)."""


@builtin
def sqrt(x):
    """The square root (fp32/fp64)."""


@builtin
def sqrt_rn(x):
    """The square root, rounded to nearest (fp32)."""


@builtin
def rsqrt(x):
    """1 / sqrt(x) (fp32/fp64)."""


@builtin
def sin(x):
    """The sine (fp32/fp64)."""


@builtin
def cos(x):
    """The cosine (fp32/fp64)."""


@builtin
def erf(x):
    """The error function (fp32/fp64)."""


@builtin
def floor(x):
    """The largest integer not above x (fp32/fp64)."""


@builtin
def ceil(x):
    """The smallest integer not below x (fp32/fp64)."""


@builtin
def sigmoid(x):
    """1 / (1 + exp(-x))."""


@builtin
def fma(x, y, z):
    """x * y + z."""


@builtin
def fdiv(x, y, ieee_rounding=False):
    """x / y for floats."""


@builtin
def cdiv(x, div):
    """The quotient rounded up: (x + div - 1) // div."""


@builtin
def umulhi(x, y):
    """The high half of the 2N-bit product of two N-bit unsigned integers."""


# --- loops and hints --------------------------------------------------------------------------------

@builtin
def static_range(arg1, arg2=None, step=None):
    """A loop over constexpr bounds, unrolled by the compiler."""


@builtin
def range(arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None, disallow_acc_multi_buffer=False,
          flatten=False, warp_specialize=False):
    """A loop (`for i in tl.range(...)`) with optional pipelining hints, which may be ignored."""


@builtin
def multiple_of(input, values):
    """A hint: `input`'s values are multiples of `values` (no effect on results)."""


@builtin
def max_contiguous(input, values):
    """A hint: the first `values` elements of `input` are contiguous (no effect on results)."""


@builtin
def max_constancy(input, values):
    """A hint: `input` is constant over runs of `values` elements (no effect on results)."""


@builtin
def debug_barrier():
    """Synchronise the threads of a program."""


# --- debugging --------------------------------------------------------------------------------------

@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False):
    """Print at compile time (in interpret mode: when the program runs)."""


@builtin
def static_assert(cond, msg=""):
    """Fail compilation when the constexpr `cond` is false."""


@builtin
def device_print(prefix, *args, hex=False):
    """Print `prefix` and the values, from each program."""


@builtin
def device_assert(cond, msg="", mask=None):
    """Fail when `cond` is false anywhere (checked in interpret mode)."""


print = device_print
