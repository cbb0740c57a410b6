"""New tensors as torch spells them: arange, zeros/ones/empty/full, eye, linspace, torch.tensor, the
`*_like` and `x.new_*` families; and `x.device`, which their `device=` takes. dtypes default as in
torch (float32; int64 for integer ranges and fills; bool for bool fills). A tensor made here lives
where the code runs: a `device=` naming another device is refused (no silent copies)."""
from __future__ import annotations

import math

import torch

from ...core.errors import Diagnostic
from ...core.types import DTYPES, TORCH_TO_NAME, dtype_name, is_float_dtype
from ..values import is_python_scalar, is_symbolic
from .registry import op, tensor, torch_property, torch_rule
from .shapes import require, shape_text, sizes

DEFAULT_FLOAT = "float32"
# Factory keywords torch takes that @jit code has no use for: their defaults are accepted, anything
# else refused (never ignored).
UNSUPPORTED = {"layout": (None, torch.strided), "pin_memory": (False,), "out": (None,),
               "memory_format": (None, torch.preserve_format, torch.contiguous_format)}


def own_device(b) -> torch.device:
    """Where the code being built runs: the compiled function's device, or the eager call's."""
    return b.device()


@torch_property("device")
def device(b, x):
    """x.device: the tensor's own in eager code; in compiled code the device it lives on (the function's,
    or a `with bt.device(...)` block's)."""
    return b.device(x)


@torch_rule(torch.device, name="torch.device")
def device_(b, type, index=None):
    """torch.device("cuda"), torch.device("cpu", 0): a compile-time value (to compare with x.device, or as device=)."""
    try:
        return torch.device(type) if index is None else torch.device(type, index)
    except (RuntimeError, TypeError) as e:
        raise Diagnostic(f"torch.device(): {e}") from None


def _options(b, where: str, dtype, default: str | None, device=None, requires_grad=False, **rest) -> str | None:
    """A factory's keywords checked (device, requires_grad, the unsupported ones); its dtype's name."""
    if requires_grad:
        raise Diagnostic(f"{where}: requires_grad=True is not supported in @jit code (a tensor made here is "
                         "not a leaf of the caller's graph); make it outside and pass it in")
    for name, value in rest.items():
        if not any(value is ok or value == ok for ok in UNSUPPORTED[name]):
            raise Diagnostic(f"{where}: {name}={value!r} is not supported in @jit code")
    if device is not None:
        try:
            want = device if isinstance(device, torch.device) else torch.device(device)
        except (RuntimeError, TypeError):
            raise Diagnostic(f"{where}: device must be a device such as 'cpu', 'cuda' or x.device, "
                             f"got {b.describe(device)}") from None
        own = own_device(b)
        if want.type != own.type:
            raise Diagnostic(f"{where}: device={str(want)!r} is not the device this code runs on ({own}); "
                             "tensors made in @jit code live there (move results with .to() outside)")
    if dtype is None:
        return default
    try:
        return dtype_name(dtype)
    except ValueError:
        raise Diagnostic(f"{where}: dtype must be a dtype such as torch.float16, got {b.describe(dtype)}") from None


def _shape(b, size, where: str) -> list:
    """Sizes as a factory takes them (varargs or one sequence), none negative."""
    shape = sizes(b, size, where)
    for s in shape:
        if isinstance(s, int) and s < 0:
            raise Diagnostic(f"{where}: Trying to create tensor with negative dimension {s}: {shape_text(shape)}")
    return shape


def _filled(name: str):
    """torch.zeros / ones / empty (empty is zeros: reading it before writing is undefined anyway)."""
    relax_name = {"empty": "zeros"}.get(name, name)

    def rule(b, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False, out=None,
             memory_format=None):
        where = f"torch.{name}()"
        dtype = _options(b, where, dtype, DEFAULT_FLOAT, device, requires_grad, layout=layout,
                         pin_memory=pin_memory, out=out, memory_format=memory_format)
        return op(b, relax_name, _shape(b, size, where), dtype)
    rule.__name__ = name
    return rule


for _name in ("zeros", "ones", "empty"):
    torch_rule(getattr(torch, _name))(_filled(_name))


def _fill_dtype(b, fill_value, where: str) -> str:
    """torch's default dtype for a fill value: bool, int64 or the default float."""
    if is_python_scalar(fill_value):
        return "bool" if isinstance(fill_value, bool) else "int64" if isinstance(fill_value, int) else DEFAULT_FLOAT
    if b.is_tensor(fill_value) and b.ndim(fill_value) == 0:
        kind = b.dtype(fill_value)
        return kind if kind == "bool" else DEFAULT_FLOAT if is_float_dtype(kind) else "int64"
    raise Diagnostic(f"{where}: fill_value must be a number (or a 0-d tensor), got {b.describe(fill_value)}")


def _full(b, shape: list, fill_value, dtype: str, where: str):
    """`shape` filled with the value as torch converts it to `dtype` (an overflow is an error)."""
    if is_python_scalar(fill_value):
        try:
            fill_value = torch.full((), fill_value, dtype=DTYPES[dtype]).item()
        except RuntimeError as e:
            raise Diagnostic(f"{where}: fill_value {fill_value!r}: {e}") from None
        return op(b, "full", shape, b.const(fill_value, dtype), dtype)
    return op(b, "full", shape, b.as_tensor(fill_value, dtype), dtype)


@torch_rule(torch.full)
def full(b, size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False,
         out=None):
    """torch.full(size, fill_value): dtype from the fill value as torch infers it, unless dtype= says."""
    dtype = _options(b, "torch.full()", dtype, _fill_dtype(b, fill_value, "torch.full()"), device, requires_grad,
                     layout=layout, pin_memory=pin_memory, out=out)
    return _full(b, _shape(b, (size,), "torch.full()"), fill_value, dtype, "torch.full()")


def _like(name: str):
    """torch.zeros_like / ones_like / empty_like / full_like: x's shape, x's dtype unless dtype= says."""
    def rule(b, input, *fill, dtype=None, layout=None, device=None, requires_grad=False, memory_format=None):
        where = f"torch.{name}()"
        x = tensor(b, input, where)
        dtype = _options(b, where, dtype, b.dtype(x), device, requires_grad, layout=layout,
                         memory_format=memory_format)
        if name == "full_like":
            if len(fill) != 1:
                raise Diagnostic(f"{where} takes (input, fill_value)")
            return _full(b, list(b.shape(x)), fill[0], dtype, where)
        if fill:
            raise Diagnostic(f"{where} takes one tensor")
        return op(b, {"ones_like": "ones"}.get(name, "zeros"), list(b.shape(x)), dtype)
    rule.__name__ = name
    return rule


for _name in ("zeros_like", "ones_like", "empty_like", "full_like"):
    torch_rule(getattr(torch, _name))(_like(_name))


def _new(name: str):
    """x.new_zeros / new_ones / new_empty / new_full: a new tensor of x's dtype (unless dtype= says)."""
    def rule(b, input, *args, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        where = f"Tensor.{name}()"
        x = tensor(b, input, where)
        dtype = _options(b, where, dtype, b.dtype(x), device, requires_grad, layout=layout, pin_memory=pin_memory)
        if name == "new_full":
            if len(args) != 2:
                raise Diagnostic(f"{where} takes (size, fill_value)")
            return _full(b, _shape(b, args[:1], where), args[1], dtype, where)
        return op(b, {"new_ones": "ones"}.get(name, "zeros"), _shape(b, args, where), dtype)
    rule.__name__ = name
    return rule


for _name in ("new_zeros", "new_ones", "new_empty", "new_full"):
    torch_rule(getattr(torch.Tensor, _name), methods=(_name,), name=f"Tensor.{_name}")(_new(_name))


@torch_rule(torch.arange)
def arange(b, start, end=None, step=1, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """torch.arange: int64 for int bounds (symbolic sizes too), the default float else; float ranges are
    computed as torch's CPU kernel does, start + i * step in float64, rounded once."""
    start, end = (0, start) if end is None else (start, end)
    for name, value in (("start", start), ("end", end), ("step", step)):
        if not (is_python_scalar(value) and not isinstance(value, bool) or is_symbolic(value)):
            raise Diagnostic(f"torch.arange(): {name} must be a number or a size known when compiling, "
                             f"got {b.describe(value)}")
    floats = any(isinstance(v, float) for v in (start, end, step))
    dtype = _options(b, "torch.arange()", dtype, DEFAULT_FLOAT if floats else "int64", device, requires_grad,
                     layout=layout, out=out)
    if step == 0:
        raise Diagnostic("torch.arange(): step must be nonzero")
    require(b, end >= start if step > 0 else end <= start,
            "torch.arange(): upper bound and lower bound inconsistent with step sign")
    if not floats:
        return b.as_tensor(op(b, "arange", start, end, step, "int64"), dtype)
    count = math.ceil((end - start) / step)
    index = b.as_tensor(op(b, "arange", 0, count, 1, "int64"), "float64")
    return b.as_tensor(op(b, "add", op(b, "multiply", index, float(step)), float(start)), dtype)


@torch_rule(torch.linspace)
def linspace(b, start, end, steps, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """torch.linspace as torch's CPU kernel computes it: the step in the result's float dtype (float64 for
    integer results); from start for the first half of the points and from end for the rest, each point
    one fused multiply-add (exact in float64, rounded once)."""
    for name, value in (("start", start), ("end", end)):
        if not is_python_scalar(value) or isinstance(value, bool):
            raise Diagnostic(f"torch.linspace(): {name} must be a number known when compiling, got {b.describe(value)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise Diagnostic(f"torch.linspace(): number of steps must be a non-negative int, got {b.describe(steps)}")
    dtype = _options(b, "torch.linspace()", dtype, DEFAULT_FLOAT, device, requires_grad, layout=layout, out=out)
    if steps <= 1:
        return _full(b, [steps], start, dtype, "torch.linspace()")
    work = dtype if is_float_dtype(dtype) else "float64"
    first, last = (torch.tensor(v, dtype=DTYPES[work]) for v in (start, end))
    step = ((last - first) / (steps - 1)).item()  # rounded to the working dtype, as torch's kernel has it
    first, last = first.item(), last.item()
    index = b.as_tensor(op(b, "arange", 0, steps, 1, "int64"), "float64")
    low = op(b, "add", op(b, "multiply", index, step), first)
    high = op(b, "subtract", last, op(b, "multiply", op(b, "subtract", float(steps - 1), index), step))
    return b.as_tensor(op(b, "where", op(b, "less", index, float(steps // 2)), low, high), dtype)


@torch_rule(torch.eye)
def eye(b, n, m=None, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False, out=None):
    """torch.eye(n, m): ones on the diagonal (n, m ints or symbolic sizes)."""
    for name, value in (("n", n), ("m", m)):
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) or is_symbolic(value)):
            raise Diagnostic(f"torch.eye(): {name} must be a size, got {b.describe(value)}")
        if isinstance(value, int) and value < 0:
            raise Diagnostic(f"torch.eye(): {name} must be greater or equal to 0, got {value}")
    dtype = _options(b, "torch.eye()", dtype, DEFAULT_FLOAT, device, requires_grad, layout=layout,
                     pin_memory=pin_memory, out=out)
    return op(b, "eye", n, n if m is None else m, 0, dtype)


def _constant(b, data, dtype: str | None, where: str):
    """Nested lists of Python numbers as a constant tensor; dtype inferred and values converted by torch."""
    try:
        ref = torch.tensor(data, dtype=None if dtype is None else DTYPES[dtype])
    except (RuntimeError, TypeError, ValueError) as e:
        raise Diagnostic(f"{where}: {e}") from None
    name = TORCH_TO_NAME[ref.dtype]
    if ref.dim() == 0:
        return b.const(ref.item(), name)
    whole = not ref.dtype.is_floating_point or bool((ref == ref.round()).all() and (ref.abs() < 2**53).all())
    if whole:  # integers, and floats holding integers: an int64 constant converted exactly
        return b.as_tensor(b.index(ref.long().tolist()), name)
    # other floats: one 0-d constant each (exact in float64), stacked; literal data is short
    items = [b.const(v, "float64") for v in ref.double().flatten().tolist()]
    return b.as_tensor(op(b, "reshape", op(b, "stack", items, 0), list(ref.shape)), name)


def _is_data(value) -> bool:
    """Numbers, or (nested) lists and tuples of them."""
    if isinstance(value, (tuple, list)):
        return all(_is_data(v) for v in value)
    return is_python_scalar(value)


@torch_rule(torch.tensor)
def tensor_(b, data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.tensor(data): numbers and nested lists of them known when compiling; a tensor is copied."""
    where = "torch.tensor()"
    name = _options(b, where, dtype, None, device, requires_grad, pin_memory=pin_memory)  # None: inferred
    if b.is_tensor(data):
        return b.as_tensor(data, name or b.dtype(data))
    if not _is_data(data):
        raise Diagnostic(f"{where} takes numbers (or nested lists of them) known when compiling, got "
                         f"{b.describe(data)}; build run-time values with torch.stack()")
    return _constant(b, data, name, where)


@torch_rule(torch.Tensor.new_tensor, methods=("new_tensor",), name="Tensor.new_tensor")
def new_tensor(b, input, data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """x.new_tensor(data): as torch.tensor(data), in x's dtype unless dtype= says."""
    x = tensor(b, input, "Tensor.new_tensor()")
    name = _options(b, "Tensor.new_tensor()", dtype, b.dtype(x), device, requires_grad, pin_memory=pin_memory)
    return tensor_(b, data, dtype=name)


def _random(name: str):
    """torch's random factories: refused (no random number generator in compiled code)."""
    def rule(b, *args, **kwargs):
        raise Diagnostic(f"torch.{name}(): @jit code has no random number generator; draw the random tensor "
                         "outside (torch) and pass it in as an argument")
    rule.__name__ = name
    return rule


for _name in ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "normal",
              "bernoulli", "multinomial"):
    torch_rule(getattr(torch, _name), refused=True)(_random(_name))
