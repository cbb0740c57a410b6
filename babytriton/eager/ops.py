"""The eager reference's library: each Relax op the compiler resolves, as torch computes it, after
the compiler's own rules (library.apply: binding, conversion, promotion, the bool and integer rules),
run with a builder of torch values (TorchBuilder) where the compiler's emits Relax; and user TensorIR
kernels, checked by the compiler's rules (kernels.check_call), compiled alone by TVM and run on the tensors.

TORCH is the table, Relax op name -> a torch function called with the op's arguments by their Relax
names (defaults filled in); `_t` builds the entries that only rename arguments (axis -> dim, ...).
Where Relax's meaning differs from torch's (`max(x, axis=1)` gives the values only, integer `divide`
truncates, `std` is the population's), the entry has Relax's.
"""
from __future__ import annotations

import contextvars
import functools
import linecache
import operator
import os
import sys
import threading

import torch
import torch.nn.functional as F
import tvm

from ..lowering import pipeline
from .. import schedules
from ..core import targets
from ..codegen import kernels, library, semantic
from ..codegen import values as core  # the compiler's value helpers (a tensor's description)
from ..codegen.operators import weak_dtype
from ..codegen.values import wrap_int
from ..core.dlpack import torch_to_vm
from ..runtime.kernel import on_torch_stream
from ..core.errors import CompilationError, Diagnostic
from ..core.types import DTYPES, TORCH_TO_NAME, format_shape

# The device that values made from nothing (constants, zeros(...)) go to during an eager call.
_DEVICE: contextvars.ContextVar[torch.device] = contextvars.ContextVar("babytriton_eager_device",
                                                                       default=torch.device("cpu"))
# The sizes the function's symbolic dimension names stand for in this eager call ("n" -> 3): what a
# bt.Tensor(("n", 4), ...) kernel placeholder means, as the compiled function's symbolic size n.
_SIZES: contextvars.ContextVar[dict] = contextvars.ContextVar("babytriton_eager_sizes", default={})
PY_SCALARS = (bool, int, float)


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _is_scalar(value) -> bool:
    return isinstance(value, PY_SCALARS)


def _describe(value) -> str:
    if _is_tensor(value):
        return core.describe_tensor(TORCH_TO_NAME.get(value.dtype, str(value.dtype)), tuple(value.shape))
    return f"{type(value).__name__} {value!r}"


# Operators whose weak-only form computes as Python does (codegen.operators.weak_dtype), by the names
# torch hands __torch_function__ (methods, dunders and their reflected forms).
_WEAK_SYMBOLS = {}
for _symbol, _names in {"+": "add", "-": "sub subtract", "*": "mul multiply", "/": "div truediv true_divide",
                        "//": "floordiv floor_divide", "%": "mod remainder", "**": "pow",
                        "&": "and bitwise_and", "|": "or bitwise_or", "^": "xor bitwise_xor",
                        "<": "lt less", "<=": "le less_equal", ">": "gt greater", ">=": "ge greater_equal",
                        "==": "eq equal", "!=": "ne not_equal"}.items():
    for _name in _names.split():
        _WEAK_SYMBOLS.update({_name: _symbol, f"__{_name}__": _symbol, f"__r{_name}__": _symbol})
_WEAK_UNARY = {"neg", "negative", "__neg__", "positive", "__pos__"}
_AS_NUMBERS = {"+", "-", "*", "/"}   # torch's arithmetic takes a Python number in their place
_OPERATORS = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv}


class WeakScalar(torch.Tensor):
    """A run-time scalar parameter in eager mode: the 0-d int64/float64/bool tensor the compiled
    function sees, promoting as the Python number it was passed as (torch's "wrapped number", which
    Python cannot make): meeting other tensors it takes their dtype unless its kind is higher;
    with numbers and other weak scalars it computes as Python does, and stays weak."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [*args, *kwargs.values()]
        weak = [v for v in leaves if isinstance(v, WeakScalar)]
        plain = [v for v in leaves if isinstance(v, torch.Tensor) and not isinstance(v, WeakScalar)]
        name = getattr(func, "__name__", "")
        if name == "result_type" and not kwargs:  # as if each weak scalar were its number (torch.where(c, s, s))
            with torch._C.DisableTorchFunctionSubclass():
                return DTYPES[library.common_dtype([_number(v) if isinstance(v, WeakScalar) else v for v in args])]
        symbol = _WEAK_SYMBOLS.get(name)
        with torch._C.DisableTorchFunctionSubclass():
            if plain and symbol is not None:  # operands of one element-wise op
                dtype = DTYPES[library.common_dtype([*plain, *(_number(w) for w in weak)])]
                if symbol in _AS_NUMBERS and dtype in (torch.float16, torch.bfloat16):
                    # a half tensor and a number: torch's own rule for a Python number (float32 for
                    # `*` and `/`, and on a GPU `+` and `-`), which the compiler follows too
                    cast = {id(w): w.item() for w in weak}
                else:
                    cast = {id(w): w.as_subclass(torch.Tensor).to(dtype) for w in weak}
            elif symbol is not None:
                numbers = [v for v in leaves if isinstance(v, PY_SCALARS)]
                dtype = DTYPES[weak_dtype(symbol, [TORCH_TO_NAME[w.dtype] for w in weak] +
                                          [_number_kind(v) for v in numbers])]
                cast = {id(w): w.as_subclass(torch.Tensor).to(dtype) for w in weak}
            else:
                cast = {id(w): w.as_subclass(torch.Tensor) for w in weak}
            args = [cast.get(id(v), v) for v in args]
            kwargs = {k: cast.get(id(v), v) for k, v in kwargs.items()}
            result = func(*args, **kwargs)
        stays_weak = symbol is not None or name in _WEAK_UNARY
        if not plain and stays_weak and isinstance(result, torch.Tensor) and result.dim() == 0:
            return result.as_subclass(WeakScalar)
        return result


def weak(value) -> "WeakScalar":
    """A run-time scalar as eager code sees it: a weak 0-d tensor."""
    return value.as_subclass(WeakScalar)


def _number(w: torch.Tensor):
    return False if w.dtype == torch.bool else 0.0 if w.dtype.is_floating_point else 0


def _number_kind(v) -> str:
    return "bool" if isinstance(v, bool) else "int64" if isinstance(v, int) else "float64"


def promotion_operand(value):
    """What `value` is to torch's promotion: a weak scalar counts as a Python number of its kind."""
    return _number(value) if isinstance(value, WeakScalar) else value


def _as_tensor(value, dtype: torch.dtype) -> torch.Tensor:
    if _is_tensor(value):
        return value.to(dtype)
    if isinstance(value, int) and not isinstance(value, bool) and not dtype.is_floating_point and dtype != torch.bool:
        value = wrap_int(value, TORCH_TO_NAME[dtype])  # as the compiler's constants (relax.wrap_int)
    return torch.tensor(value, dtype=dtype, device=_DEVICE.get())


# ----------------------------------------------------------------------------------------------
# library ops and kernels: the compiler's rules (library.apply, kernels.check_call), torch's values
# ----------------------------------------------------------------------------------------------
class TorchBuilder:
    """The eager reference's library.Builder: values are torch tensors (run-time scalars weak ones),
    and what the compiler would emit is computed by torch at once."""
    # The ops legalize.HALF_IN_FLOAT32 computes in float32 inside the compiled kernel: here, on
    # float32 copies, rounded back once, as there.
    half_in_float32 = library.HALF_IN_FLOAT32

    def is_tensor(self, value) -> bool:
        return _is_tensor(value)

    def dtype(self, value) -> str:
        return TORCH_TO_NAME[value.dtype]

    def shape(self, value) -> tuple:
        return tuple(value.shape)

    def ndim(self, value) -> int:
        return value.dim()

    def describe(self, value) -> str:
        return _describe(value)

    def is_weak(self, value) -> bool:
        return _is_scalar(value) or isinstance(value, WeakScalar)

    def promotion_operand(self, value):
        return promotion_operand(value)

    def weak(self, result):
        return weak(result) if result.dim() == 0 and not isinstance(result, WeakScalar) else result

    def symbolic(self, name: str):
        return _SIZES.get().get(name, name)

    def operand(self, value):
        return semantic.operand(self, value)

    def const(self, value, dtype: str):
        return _as_tensor(value, DTYPES[dtype])

    def as_tensor(self, value, dtype: str):
        return _as_tensor(value, DTYPES[dtype])

    def index(self, value):
        return torch.tensor(value, dtype=torch.int64, device=_DEVICE.get())

    def dtype_value(self, name: str):
        return DTYPES[name]

    def scalar(self, value, dtype: str | None):
        return int(value) if dtype is not None and not DTYPES[dtype].is_floating_point else value

    def sequence(self, value):
        return tuple(self.sequence(v) for v in value) if isinstance(value, (tuple, list)) else value

    def is_run_time(self, value) -> bool:
        return _is_tensor(value)

    def device(self, value=None) -> torch.device:
        return value.device if _is_tensor(value) else _DEVICE.get()

    def stop_gradient(self, value):
        return value.detach()

    def is_tensors(self, value) -> bool:
        return False  # several tensors are a Python tuple of them here

    def aligned(self, *operands) -> list:
        return list(operands)  # sizes are numbers here: torch broadcasts them

    def check_sizes(self, op: library.Op, values: dict) -> None:
        pass  # torch sees the sizes when it runs the op (an empty max/min axis: _nonempty)

    def same_as_operator(self, name: str, x1, x2):
        return SAME_AS_OPERATOR[name](x1, x2)

    def as_operator(self, name: str, x1, x2):
        """A half tensor and a number: the operator on them (torch's rule for a Python number, which a
        weak scalar takes part as), not the op on the number cast to the half dtype; else None."""
        halves = [v for v in (x1, x2) if _is_tensor(v) and not isinstance(v, WeakScalar)
                  and v.dtype in (torch.float16, torch.bfloat16)]
        numbers = [v for v in (x1, x2) if isinstance(v, (WeakScalar, *PY_SCALARS)) and not isinstance(v, bool)]
        if len(halves) != 1 or len(numbers) != 1:
            return None
        return _OPERATORS[name](x1, x2)

    def emit(self, op: library.Op, values: dict):
        fn = TORCH.get(op.name)
        if fn is None:
            raise NotImplementedError(f"{op.name}() has no torch equivalent in babytriton's eager mode yet; "
                                      "run the compiled function instead")
        for name, param in op.signature.parameters.items():  # the Relax op's own defaults, converted
            if name not in values and param.default is not param.empty:
                values[name] = library.convert(self, op, name, param.default, values)
        return fn(**values)

    def rounded_back(self, result, dtype: str):
        if isinstance(result, (tuple, list)):
            return type(result)(self.rounded_back(r, dtype) for r in result)
        return result.to(DTYPES[dtype]) if _is_tensor(result) and result.dtype == torch.float32 else result

    def promote(self, x1, x2) -> str:
        return TORCH_TO_NAME[torch.result_type(x1, x2)]  # weak scalars as numbers (WeakScalar)

    def logical(self, symbol: str, x1, x2):
        x1, x2 = (v if _is_tensor(v) else torch.tensor(v, device=_DEVICE.get()) for v in (x1, x2))
        return (torch.logical_and if symbol == "and" else torch.logical_or)(x1, x2)

    def logical_not(self, value):
        return torch.logical_not(value)

    def bitwise_not(self, value):
        return torch.bitwise_not(value)

    def select(self, cond, x1, x2, dtype: str):
        return torch.where(cond, _as_tensor(x1, DTYPES[dtype]), _as_tensor(x2, DTYPES[dtype]))


BUILDER = TorchBuilder()


def call_op(op: library.Op, args: list, kwargs: dict):
    """`op(*args, **kwargs)` with the compiler's rules (library.apply), computed by torch."""
    try:
        return library.apply(BUILDER, op, args, kwargs)
    except Diagnostic as e:
        raise TypeError(str(e)) from None


def _matmul(a, b):
    """`a @ b` as compiled: one dtype (the compiler's check); float16/bfloat16 products accumulate in float32."""
    semantic.check_matmul(BUILDER, a, b)
    if a.dtype in (torch.float16, torch.bfloat16):
        return torch.matmul(a.float(), b.float()).to(a.dtype)
    return torch.matmul(a, b)


SAME_AS_OPERATOR = {"matmul": _matmul, "power": operator.pow}


# -- the table: Relax op name -> torch, called with the op's (converted) arguments by Relax name --
def _t(fn, *positional, **renamed):
    """torch's `fn` called with the op's `positional` parameters in order and the rest renamed
    (Relax name -> torch name; a name mapped to None is dropped)."""
    def call(**kw):
        args = [kw.pop(p) for p in positional]
        options = {renamed.get(k, k): v for k, v in kw.items() if renamed.get(k, k) is not None}
        return fn(*args, **options)
    return call


def _reduce(fn):
    """Relax reductions: `axis` an int, a tuple or None (all axes)."""
    def call(x, axis=None, keepdims=False):
        return fn(x, dim=axis, keepdim=keepdims)
    return call


def _prod(x, dim, keepdim):
    axes = range(x.dim()) if dim is None else (dim,) if isinstance(dim, int) else dim
    for axis in sorted((a % max(x.dim(), 1) for a in axes), reverse=True):
        x = torch.prod(x, dim=axis, keepdim=True)
    if not keepdim:
        x = x.reshape([n for i, n in enumerate(x.shape) if i not in {a % max(x.dim(), 1) for a in axes}]) \
            if x.dim() else x
    return x


def _nonempty(name: str, x, dim) -> None:
    """An axis of size 0 has no max/min/argmax/argmin: the compiler's error, in its words."""
    dims = range(x.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
    for d in dims:
        if -x.dim() <= d < x.dim() and x.shape[d] == 0:
            raise RuntimeError(library.empty_axis_message(name, d % x.dim(), format_shape(tuple(x.shape)), True))


def _extreme(fn, name):
    def call(x, dim, keepdim):
        _nonempty(name, x, dim)
        return fn(x, dim=() if dim is None else dim, keepdim=keepdim)
    return call


def _arg(fn, name):
    def call(x, dim, keepdim):
        _nonempty(name, x, dim)
        if dim is None and keepdim:
            return fn(x.reshape(-1), dim=0).reshape([1] * x.dim())
        return fn(x, dim=dim, keepdim=keepdim)
    return call


def _divide(x1, x2):
    """Relax's divide: true division on floats, truncating on integers."""
    if x1.dtype.is_floating_point:
        return torch.div(x1, x2)
    return torch.div(x1, x2, rounding_mode="trunc")


def _cumulative(fn):
    def call(data, axis=None, dtype=None, exclusive=False):
        if axis is None:
            data, axis = data.reshape(-1), 0
        out = fn(data, dim=axis, dtype=dtype)
        if exclusive:  # each position leaves its own element out
            out = out - data.to(out.dtype) if fn is torch.cumsum else out / data.to(out.dtype)
        return out
    return call


def _permute(x, axes=None):
    return x.permute(tuple(axes) if axes is not None else tuple(reversed(range(x.dim()))))


def _expand_dims(x, axis):
    axes = (axis,) if isinstance(axis, int) else axis
    rank = x.dim() + len(axes)
    for position in sorted(a % rank for a in axes):
        x = x.unsqueeze(position)
    return x


def _squeeze(x, axis=None):
    return torch.squeeze(x) if axis is None else torch.squeeze(x, dim=axis)


def _full(shape, fill_value, dtype=None):
    return torch.full(shape, fill_value.item(), dtype=dtype or fill_value.dtype, device=_DEVICE.get())


def _full_like(x, fill_value, dtype=None):
    return torch.full_like(x, fill_value.item(), dtype=dtype or x.dtype)


def _filled(fn):
    def call(shape, dtype):
        return fn(shape, dtype=dtype, device=_DEVICE.get())
    return call


def _norm_shape(x, axes):
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted(a % x.dim() for a in axes))


def _spread(weight, x, axes):
    """A weight laid along `axes` of x (its shape is theirs), broadcastable against x."""
    shape = [1] * x.dim()
    for axis, size in zip(axes, weight.shape):
        shape[axis] = size
    return weight.reshape(shape)


def _layer_norm(data, gamma, beta, axes, epsilon=1e-05, center=True, scale=True):
    axes = _norm_shape(data, axes)
    mean = data.mean(dim=axes, keepdim=True)
    var = ((data - mean) ** 2).mean(dim=axes, keepdim=True)
    out = (data - mean) / torch.sqrt(var + epsilon)
    if scale:
        out = out * _spread(gamma, data, axes)
    if center:
        out = out + _spread(beta, data, axes)
    return out


def _rms_norm(data, weight, axes=-1, epsilon=1e-05):
    axes = _norm_shape(data, axes)
    return data / torch.sqrt((data * data).mean(dim=axes, keepdim=True) + epsilon) * _spread(weight, data, axes)


def _matmul_op(x1, x2, out_dtype=None):
    if out_dtype is not None:
        return torch.matmul(x1.to(out_dtype), x2.to(out_dtype))
    return torch.matmul(x1, x2)


def _linear(data, weight, bias=None, out_dtype=None):
    out = F.linear(data, weight, bias)
    return out if out_dtype is None else out.to(out_dtype)


def _take(x, indices, axis=None, mode="fast"):
    if axis is None:
        return torch.take(x, indices.long())
    axis %= x.dim()
    out = x.movedim(axis, 0)[indices.long()]
    return out.movedim(tuple(range(indices.dim())), tuple(range(axis, axis + indices.dim())))


def _strided_slice(x, axes, begin, end, strides=None, assume_inbound=False):
    """Relax's strided_slice: on each of `axes`, begin:end:stride as Python slices them (clipped)."""
    for i, axis in enumerate(axes):
        stride = strides[i] if strides is not None else 1
        picked = range(*slice(begin[i], end[i], stride).indices(x.shape[axis]))
        x = x.index_select(axis, torch.tensor(list(picked), dtype=torch.int64, device=x.device))
    return x


def _topk(data, k=1, axis=-1, ret_type="both", largest=True, dtype=torch.int32):
    values, indices = torch.topk(data, k, dim=axis, largest=largest)
    indices = indices.to(dtype)
    return {"both": (values, indices), "values": values, "indices": indices}[ret_type]


def _conv_pads(padding) -> tuple:
    """Relax's conv2d padding (one int, (rows, cols) or (top, left, bottom, right)) as F.pad's (l, r, t, b)."""
    p = (padding,) * 4 if isinstance(padding, int) else tuple(padding) * 2 if len(padding) == 2 else tuple(padding)
    return p[1], p[3], p[0], p[2]


def _eye(n, m=None, k=0, dtype=torch.float32):
    return torch.ones(n, n if m is None else m, dtype=dtype, device=_DEVICE.get()).tril(k).triu(k)


def _gelu(x):
    """gelu as compiled kernels compute it (gelu(inf) = inf): in float64, rounded once. torch's float32
    kernel, which its half dtypes use too, gives NaN at +inf and inf near 3e38 on AVX-512 CPUs."""
    return F.gelu(x.double()).to(x.dtype) if x.is_floating_point() else F.gelu(x)


_UNARY = {
    "abs": torch.abs, "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin, "asinh": torch.asinh,
    "atan": torch.atan, "atanh": torch.atanh, "ceil": torch.ceil, "cos": torch.cos, "cosh": torch.cosh,
    "erf": torch.erf, "exp": torch.exp, "floor": torch.floor, "isfinite": torch.isfinite, "isinf": torch.isinf,
    "isnan": torch.isnan, "log": torch.log, "negative": torch.neg, "round": torch.round, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid, "sign": torch.sign, "sin": torch.sin, "sinh": torch.sinh, "sqrt": torch.sqrt,
    "square": torch.square, "tan": torch.tan, "tanh": torch.tanh, "trunc": torch.trunc,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "relu": torch.relu, "relu6": F.relu6, "silu": F.silu, "selu": F.selu, "gelu": _gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "flatten": torch.flatten,
    "batch_flatten": functools.partial(torch.flatten, start_dim=1),
}
_BINARY = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": _divide,
    "floor_divide": torch.floor_divide, "floor_mod": torch.remainder, "mod": torch.fmod, "power": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "equal": torch.eq, "not_equal": torch.ne,
    "less": torch.lt, "less_equal": torch.le, "greater": torch.gt, "greater_equal": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "left_shift": torch.bitwise_left_shift, "right_shift": torch.bitwise_right_shift, "atan2": torch.atan2,
    "log_add_exp": torch.logaddexp, "outer": torch.outer,
}
_REDUCTIONS = {
    "sum": torch.sum, "mean": torch.mean, "max": _extreme(torch.amax, "max"), "min": _extreme(torch.amin, "min"), "prod": _prod,
    "argmax": _arg(torch.argmax, "argmax"), "argmin": _arg(torch.argmin, "argmin"),
    "std": functools.partial(torch.std, correction=0), "variance": functools.partial(torch.var, correction=0),
}
TORCH = {
    **{name: _t(fn, "x") if "x" in library.table()[name].kinds else _t(fn, "data") for name, fn in _UNARY.items()},
    **{name: _t(fn, "x1", "x2") for name, fn in _BINARY.items()},
    **{name: _reduce(fn) for name, fn in _REDUCTIONS.items()},
    "where": lambda condition, x1, x2: torch.where(condition.bool(), x1, x2),
    "clip": _t(torch.clamp, "x", "min", "max"),
    "cumsum": _cumulative(torch.cumsum), "cumprod": _cumulative(torch.cumprod),
    "softmax": _t(torch.softmax, "data", axis="dim"), "log_softmax": _t(torch.log_softmax, "data", axis="dim"),
    "leakyrelu": _t(F.leaky_relu, "data", "alpha"), "softplus": _t(F.softplus, "data", "beta", "threshold"),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "matmul": _matmul_op, "linear": _linear,
    "reshape": _t(torch.reshape, "x", "shape"), "permute_dims": _permute,
    "concat": _t(torch.cat, "tensors", axis="dim"), "stack": _t(torch.stack, "tensors", axis="dim"),
    "squeeze": _squeeze, "expand_dims": _expand_dims, "broadcast_to": _t(torch.broadcast_to, "x", "shape"),
    "astype": lambda x, dtype: x.to(dtype),
    "tril": _t(torch.tril, "x", k="diagonal"), "triu": _t(torch.triu, "x", k="diagonal"),
    "zeros": _filled(torch.zeros), "ones": _filled(torch.ones), "full": _full,
    "zeros_like": _t(torch.zeros_like, "x"), "ones_like": _t(torch.ones_like, "x"), "full_like": _full_like,
    "eye": _eye, "eye_like": lambda x, k=0, dtype=None: _eye(x.shape[0], x.shape[1], k, dtype or x.dtype),
    "arange": lambda start, end=None, step=1, dtype=None: (
        torch.arange(start, dtype=dtype, device=_DEVICE.get()) if end is None
        else torch.arange(start, end, step, dtype=dtype, device=_DEVICE.get())),
    "tile": lambda data, repeats: torch.tile(data, (repeats,) if isinstance(repeats, int) else repeats),
    "repeat": _t(torch.repeat_interleave, "data", "repeats", axis="dim"),
    "take": _take, "strided_slice": _strided_slice, "gather_elements": lambda data, indices, axis=0: torch.gather(data, axis, indices.long()),
    "masked_fill": lambda x, mask, value: torch.where(mask, value, x),
    "scatter_elements": lambda data, indices, updates, axis=0, reduction="update": data.scatter(  # indexing.setitem
        axis, indices.long(), updates) if reduction == "update" else data.scatter_add(  # saves no data to be written
        axis, indices.long(), updates) if reduction == "add" else data.scatter_reduce(axis, indices.long(), updates,
                                                                                          {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}.get(reduction, reduction)),
    "sort": lambda x, axis=-1, descending=False: torch.sort(x, dim=axis, descending=descending, stable=True).values,
    "argsort": lambda data, axis=-1, descending=False, dtype=torch.int32: torch.argsort(
        data, dim=axis, descending=descending, stable=True).to(dtype),
    "topk": _topk,
    "split": lambda x, indices_or_sections, axis=0: torch.tensor_split(x, indices_or_sections, dim=axis),
    "collapse_sum_like": lambda data, collapse_target: data.sum_to_size(collapse_target.shape),
    "collapse_sum_to": lambda data, shape: data.sum_to_size(shape),
    "flip": lambda data, axis: torch.flip(data, dims=(axis,)),
    "bucketize": lambda input_tensor, boundaries, out_int32=False, right=False: torch.bucketize(
        input_tensor, boundaries, out_int32=out_int32, right=right),
    "conv2d": lambda data, weight, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, **layouts: F.conv2d(
        F.pad(data, _conv_pads(padding)), weight, None, strides, 0, dilation, groups),  # Relax pads each side
}


# ----------------------------------------------------------------------------------------------
# TensorIR kernels, compiled alone and run on the tensors
# ----------------------------------------------------------------------------------------------
_KERNELS: dict = {}
_KERNELS_LOCK = threading.Lock()


def run_kernel(kernel, name: str, *args, **kwargs):
    """`kernel(*inputs[, placeholders])` in eager code: the buffers checked as the compiled call
    checks them, the outputs allocated, the kernel built for the inputs' device and run."""
    try:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            # differentiable through its @bt.grad_for function, if it has one
            run = functools.partial(_run_kernel, kernel, name, kwargs=kwargs, count=True)
            return _KernelFunction.apply(run, kernel, name, _caller(), *args)
        return _run_kernel(kernel, name, list(args), kwargs)
    except Diagnostic as e:
        raise TypeError(str(e)) from None


class _KernelFunction(torch.autograd.Function):
    """An eager kernel call on tensors that require grad: its backward is the kernel's @bt.grad_for
    function, else an error naming the kernel and where (file, line) it was called."""

    @staticmethod
    def forward(ctx, run, kernel, name, where, *args):
        outputs, n_inputs = run(list(args))
        ctx.kernel, ctx.name, ctx.where, ctx.n_inputs, ctx.n_args = kernel, name, where, n_inputs, len(args)
        inputs = args[:n_inputs]
        ctx.save_for_backward(*inputs)
        many = outputs if isinstance(outputs, tuple) else (outputs,)
        ctx.float_outputs = [isinstance(o, torch.Tensor) and o.is_floating_point() for o in many]
        ctx.mark_non_differentiable(*(o for o, f in zip(many, ctx.float_outputs) if not f))
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        fn = kernels.gradient_of(ctx.kernel)
        if fn is None:
            filename, lineno, line = ctx.where
            col = len(line) - len(line.lstrip()) if line else None
            raise CompilationError(kernels.no_gradient_message(ctx.name), filename, lineno, col, line)
        inputs = ctx.saved_tensors
        got = fn(*inputs, *(g for g, f in zip(grads, ctx.float_outputs) if f))
        got = list(got) if isinstance(got, tuple) else [got]
        floats = [i for i, t in enumerate(inputs) if t.is_floating_point()]
        if len(got) != len(floats):
            raise TypeError(f"the @bt.grad_for function '{fn.__name__}' of kernel `{ctx.name}` returned "
                            f"{len(got)} gradient(s); the kernel has {len(floats)} floating-point input(s)")
        out = [None] * ctx.n_args
        for i, g in zip(floats, got):
            out[i] = g if ctx.needs_input_grad[4 + i] else None
        return (None, None, None, None) + tuple(out)


def _caller() -> tuple:
    """(file, line, source line) of the user's code that called into this module."""
    frame = sys._getframe(1)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # babytriton/
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", None, None)
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    return (filename, lineno, linecache.getline(filename, lineno) or None)


def _run_kernel(kernel, name: str, args: list, kwargs: dict, count: bool = False):
    buffers = kernels.check_call(BUILDER, kernel, name, args, kwargs)
    device = buffers.inputs[0].device if buffers.inputs else _DEVICE.get()
    outputs = [torch.empty(shape, dtype=DTYPES[dtype], device=device) for shape, dtype in buffers.outputs]
    built = _built_kernel(kernel, name, buffers.sizes, device)
    if device.type == "cuda":   # TVM tensors carry no stream: launched on torch's current one
        built = on_torch_stream(built, torch.cuda.current_device() if device.index is None else device.index)
    built(*[torch_to_vm(t.detach().contiguous()) for t in buffers.inputs], *[torch_to_vm(t) for t in outputs])
    result = outputs[0] if len(outputs) == 1 else tuple(outputs)
    return (result, len(buffers.inputs)) if count else result


def _built_kernel(kernel, name: str, sizes: dict, device: torch.device):
    key = (kernel, tuple(sorted(sizes.items())), device.type)
    with _KERNELS_LOCK:
        built = _KERNELS.get(key)
        if built is None:
            func = kernels.prepare(kernels.specialize(name, kernel, sizes)).with_attr("global_symbol", "main")
            if device.type == "cuda":
                target = targets.resolve_target("gpu")
                if not kernels.binds_threads(func):
                    from tvm.s_tir import dlight
                    mod = tvm.IRModule({"main": func})
                    with target:
                        mod = dlight.ApplyDefaultSchedule(*schedules.gpu_rules("dlight"))(mod)
                    func = mod["main"]
            elif kernels.binds_threads(func):
                raise Diagnostic(f"kernel `{name}` binds GPU threads, so it runs on CUDA tensors only")
            else:
                target = targets.resolve_target("cpu")
            built = _KERNELS[key] = pipeline.compile_module(tvm.IRModule({"main": func}), target)["main"]
    return built
