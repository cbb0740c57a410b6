"""What a @jit parameter can be (Tensor annotation, runtime scalar, constexpr), and the dtypes babytriton
supports. Checking a call's arguments against these is arguments.py; handing them to the VM, dlpack.py."""
from __future__ import annotations

import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# One table of supported element types; torch's dtypes are the reference semantics.
DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
TORCH_TO_NAME = {v: k for k, v in DTYPES.items()}


class DtypeName(str):
    """A tensor's dtype as @jit code reads it (`x.dtype`): its name ("float16"), equal to that name and
    to the torch.dtype it names, so that both `x.dtype == "float16"` and `x.dtype == torch.float16`
    (and `x.dtype in (torch.float16, torch.bfloat16)`) hold, as in model code."""

    def __eq__(self, other):
        if isinstance(other, torch.dtype):
            return TORCH_TO_NAME.get(other) == str(self)
        return str.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    __hash__ = str.__hash__

    # what model code reads of a torch.dtype: `x.dtype.is_floating_point`, `x.dtype.itemsize`
    is_floating_point = property(lambda self: DTYPES[self].is_floating_point)
    is_signed = property(lambda self: DTYPES[self].is_signed)
    is_complex = property(lambda self: False)
    itemsize = property(lambda self: DTYPES[self].itemsize)


def is_float_dtype(dtype) -> bool:
    """Whether a dtype (its name, or TVM's DataType) is a floating-point type: float16/32/64, bfloat16."""
    return str(dtype).startswith(("float", "bfloat"))

_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int64", "long": "int64"}


def dtype_name(dtype: Any) -> str:
    """Normalise a dtype given as a string, torch.dtype or numpy dtype to its name ("float32")."""
    if isinstance(dtype, torch.dtype):
        name = TORCH_TO_NAME.get(dtype)
    elif isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return name


def _check_shape(shape: Any) -> tuple:
    if isinstance(shape, (int, str)):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValueError(f"a Tensor shape is a tuple of ints and names, got {shape!r}") from None
    for dim in shape:
        ok_int = isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0
        ok_name = isinstance(dim, str) and dim.isidentifier()
        if not (ok_int or ok_name):
            raise ValueError(f"a Tensor shape entry is a non-negative int or a name like 'n', got {dim!r}")
    return shape


class Tensor:
    """`bt.Tensor(shape, dtype)`: a parameter annotation, or (the tutorial's way) a value holding data.

    Shape entries are ints or names; a name is a symbolic dimension shared by every parameter using it.
    """

    __slots__ = ("shape", "dtype", "_data")

    def __init__(self, shape=(), dtype="float32"):
        self.shape = _check_shape(shape)
        self.dtype = dtype_name(dtype)
        self._data = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"Tensor.data takes a torch tensor or numpy array, got {type(value).__name__}")
        got = TORCH_TO_NAME.get(value.dtype, str(value.dtype))
        if got != self.dtype:
            raise ValueError(f"Tensor.data: expected dtype {self.dtype}, got {got}")
        if not shape_matches(self.shape, tuple(value.shape)):
            raise ValueError(f"Tensor.data: expected shape {format_shape(self.shape)}, got {format_shape(value.shape)}")
        self._data = value

    def __repr__(self) -> str:
        return f"Tensor({format_shape(self.shape)}, {self.dtype!r})"

    def __eq__(self, other):
        return isinstance(other, Tensor) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


class constexpr:
    """Annotation for a compile-time parameter: its value is part of the cache key and folds into the IR."""

    def __init__(self):
        raise TypeError("bt.constexpr is an annotation (`n: bt.constexpr`), not a value")


# A symbolic divisor the VM must not divide by when it is 0 (codegen writes `n // m` as
# `n // (m == 0 ? 1 : m)` and checks m): shown as the user wrote it.
_GUARDED_DIVISOR = re.compile(r"T\.Select\((\w+) == T\.int64\(0\), T\.int64\(1\), \1\)")


def format_size(size) -> str:
    """A static or symbolic size in a message."""
    return _GUARDED_DIVISOR.sub(r"\1", str(size))


def format_shape(shape) -> str:
    dims = ", ".join(format_size(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def shape_matches(annotated: tuple, actual: tuple) -> bool:
    return len(annotated) == len(actual) and all(
        isinstance(a, str) or a == b for a, b in zip(annotated, actual))


# --------------------------------------------------------------------------------------------------
# Parameters: what the signature says
# --------------------------------------------------------------------------------------------------

SCALAR_TYPES = {bool: "bool", int: "int64", float: "float64"}


@dataclass(frozen=True)
class Param:
    """One parameter of a @jit function: kind is "tensor", "scalar", "constexpr" or "auto"."""
    name: str
    kind: str
    annotation: Any = None     # Tensor for "tensor", the Python type for "scalar"
    default: Any = inspect.Parameter.empty


def params_from_signature(sig: inspect.Signature, where) -> list[Param]:
    """Read each parameter's annotation; `where(name, message)` builds the error for a bad one."""
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise where(p.name, f"*{p.name} / **{p.name} parameters are not supported in @jit functions")
        ann = p.annotation
        if isinstance(ann, str):
            raise where(p.name, f"parameter '{p.name}' has the annotation {ann!r}, which cannot be evaluated "
                                "from the module's globals; define what it names at module level")
        if ann is inspect.Parameter.empty or ann is torch.Tensor or ann == typing.Optional[torch.Tensor]:
            kind = "auto"  # Optional[torch.Tensor]: a tensor, or None (a compile-time value)
        elif isinstance(ann, Tensor):
            kind = "tensor"
        elif ann is constexpr:
            kind = "constexpr"
        elif ann in SCALAR_TYPES:
            kind = "scalar"
        else:
            shown = ann.__name__ if isinstance(ann, type) else repr(ann)
            raise where(p.name, f"parameter '{p.name}' has the annotation {shown}; use bt.Tensor(shape, dtype), "
                                "int, float, bool or bt.constexpr")
        params.append(Param(p.name, kind, ann, p.default))
    return params
