"""What a value is while compiling: compile-time Python values (numbers, tuples, shape entries),
symbolic sizes (TIR expressions) and Relax tensors; how to describe one in a message, and the
dtype and shape rules on them. The visitors and the modules they call (library, kernels, inline,
control, loops) share these; nothing here knows a visitor."""
from __future__ import annotations

import builtins
import functools

import torch
import tvm
import tvm_ffi
from tvm import relax, tirx

from ..core.errors import Diagnostic
from ..core.types import DTYPES, TORCH_TO_NAME, format_shape, format_size

PY_SCALARS = (bool, int, float)
# Python builtins that make sense on compile-time values inside @jit code.
PY_BUILTINS = {name: getattr(builtins, name) for name in ("abs", "min", "max", "int", "float", "bool", "round")}


def is_tensor(value) -> bool:
    return isinstance(value, relax.Expr) and isinstance(value.ty, relax.TensorType)


def is_symbolic(value) -> bool:
    """A TIR expression over symbolic dimensions, e.g. `x.shape[0]` of a `("n", 3)` tensor."""
    return isinstance(value, tvm.ir.Expr) and isinstance(value.ty, tvm.ir.PrimType)


def is_python_scalar(value) -> bool:
    return isinstance(value, PY_SCALARS)


def is_plain(value) -> bool:
    """A compile-time value that Python compares by itself: numbers, strings, dtypes, None, tuples of them."""
    if isinstance(value, tuple):
        return all(is_plain(v) for v in value)
    return value is None or isinstance(value, (*PY_SCALARS, str, torch.dtype, torch.device))


def dtype_of(value) -> str:
    return str(value.ty.dtype)


def shape_of(value) -> tuple:
    """Static entries as ints, symbolic ones as TIR expressions."""
    shape = value.ty.shape
    if shape is None:
        return tuple([None] * value.ty.ndim)
    return tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in shape.values)


def describe_tensor(dtype: str, shape: tuple) -> str:
    """A tensor in a message, "a float32 tensor of shape (2, 3)" (the compiler's and eager's words)."""
    return f"{'an' if dtype.startswith('int') else 'a'} {dtype} tensor of shape {format_shape(shape)}"


def describe(value) -> str:
    if is_tensor(value):
        return describe_tensor(dtype_of(value), shape_of(value))
    if isinstance(value, relax.Expr) and isinstance(value.ty, relax.TupleType):
        return f"a tuple of {len(value.ty.fields)} values"
    if is_symbolic(value):
        return f"the symbolic size {format_size(value)}"
    return f"{type(value).__name__} {value!r}"


@functools.lru_cache(maxsize=None)
def _dummy(dtype: str, zero_dim: bool) -> torch.Tensor:
    return torch.empty(() if zero_dim else (1,), dtype=DTYPES[dtype])


def _torch_operand(value):
    return _dummy(dtype_of(value), value.ty.ndim == 0) if is_tensor(value) else value


def promote(lhs, rhs) -> str:
    """The result dtype of combining two operands, by torch's rules (0-d tensors and Python numbers
    don't widen a dimensioned tensor's dtype)."""
    return TORCH_TO_NAME[torch.result_type(_torch_operand(lhs), _torch_operand(rhs))]


def wrap_int(value: int, dtype: str) -> int:
    """A Python int as an integer dtype holds it, wrapping as torch converts a number meeting an
    integer tensor (`int32 + 2**40` adds 0); beyond 64 bits torch refuses, and so do we."""
    if not -2**63 <= value < 2**64:
        raise Diagnostic(f"the int {value} is too big to convert to {dtype} (torch refuses it too)")
    bits = int(dtype.lstrip("uint"))
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype.startswith("int") and value >= 1 << (bits - 1) else value


def round_float(value, dtype: str) -> float:
    """A Python number as the float `dtype` holds it, converted as torch converts a number meeting a
    tensor of that dtype (float16 + 70000 adds inf): past the dtype's range ±inf, silently (numpy
    warns of the overflow, and TVM refuses a finite literal beyond the range)."""
    try:
        value = float(value)
    except OverflowError:  # an int beyond float64: torch refuses it too
        raise Diagnostic(f"the int {value} is too big to convert to {dtype} (torch refuses it too)") from None
    return torch.tensor(value, dtype=torch.float64).to(DTYPES[dtype]).item()


def scalar_kind(value) -> str:
    """The dtype name of a number or 0-d tensor: Python numbers as bool, int64 or float64."""
    if is_tensor(value):
        return dtype_of(value)
    return "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float64"


def same_size(a, b) -> bool:
    """Whether two sizes are known to be equal at compile time: equal ints, or expressions equal
    whatever the (non-negative) symbolic sizes are (`max(n - 1, 0)` and `min(max(n - 1, 0), n)`)."""
    return compare_sizes(a, b) is True


def size_expr(size, dtype: str):
    """A size as a TIR expression of `dtype` (sizes are int64; an int32 one is widened, exactly)."""
    if isinstance(size, int):
        return tirx.const(size, dtype)
    return size if str(size.ty.dtype) == dtype else tirx.Cast(dtype, size)


def compare_sizes(a, b) -> bool | None:
    """True when two sizes are equal for every non-negative value of the symbolic sizes they read,
    False when they are equal for none, None when that depends on the sizes (`n // 2` against
    `n - n // 2`): a check made when the code runs must then decide."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if not isinstance(a, int) and not isinstance(b, int) and tvm_ffi.structural_equal(a, b):
        return True
    a, b = size_expr(a, "int64"), size_expr(b, "int64")
    sizes = [v >= 0 for v in {*tirx.analysis.undefined_vars(a), *tirx.analysis.undefined_vars(b)}]
    analyzer = tvm.sym.Analyzer()
    with analyzer.constraint_scope(tirx.all(*sizes) if sizes else tirx.const(True)):
        if analyzer.can_prove_equal(a, b):
            return True
        if analyzer.can_prove(tirx.NE(a, b)):
            return False
    return None


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """Broadcast two shapes; None when static sizes disagree. Symbolic sizes are trusted to match."""
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a), reversed((1,) * (len(a) - len(b)) + b)):
        if isinstance(x, int) and isinstance(y, int):
            if x != y and 1 not in (x, y):
                return None
            out.append(max(x, y) if 0 not in (x, y) else 0)
        else:
            out.append(y if x == 1 else x)
    return tuple(reversed(out))
