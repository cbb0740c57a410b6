"""What a @jit parameter can be (Tensor annotation, runtime scalar, constexpr) and how call
arguments are checked and handed to the Relax VM without copies."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import tvm

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


def format_shape(shape) -> str:
    dims = ", ".join(str(d) for d in shape)
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
        if ann is inspect.Parameter.empty or ann is torch.Tensor:
            kind = "auto"
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


# --------------------------------------------------------------------------------------------------
# Arguments: what a call passes
# --------------------------------------------------------------------------------------------------

def unwrap(value):
    """A bt.Tensor value stands for its data."""
    if isinstance(value, Tensor):
        if value.data is None:
            raise ValueError(f"{value!r} has no data; set `.data = torch_tensor` before calling")
        return value.data
    return value


def is_tensor_like(value) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray, Tensor))


@dataclass(frozen=True)
class ArgSpec:
    """What the compiler needs to know about one argument: enough to generate code for it."""
    kind: str                 # "tensor" | "scalar" | "constexpr"
    shape: tuple = ()         # tensor: ints and symbolic names
    dtype: str = ""           # tensor / scalar element type
    value: Any = None         # constexpr value
    device: str = ""          # functions with device blocks: "cpu" or "cuda:<index>" ("" = the target's)
    # constexpr: the value's type, so that 3, 3.0 and True (equal in Python) key different versions
    value_type: str = ""

    def __post_init__(self):
        if self.kind == "constexpr" and not self.value_type:
            object.__setattr__(self, "value_type", _type_signature(self.value))


def _type_signature(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[{','.join(_type_signature(v) for v in value)}]"
    return type(value).__qualname__


def arg_spec(param: Param, value, fname: str) -> ArgSpec:
    """Check one argument against its parameter and describe it; errors name the parameter."""
    where = f"{fname}(): parameter '{param.name}'"
    kind = param.kind
    if kind == "constexpr":
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"{where} is bt.constexpr, so its value must be hashable; got {type(value).__name__}") from None
        return ArgSpec("constexpr", value=value)
    if kind == "auto":
        if is_tensor_like(value):
            kind = "tensor"
        elif type(value) in SCALAR_TYPES:
            return ArgSpec("scalar", dtype=SCALAR_TYPES[type(value)])
        else:
            raise TypeError(f"{where} expects a tensor (torch, numpy or bt.Tensor) or a number, "
                            f"got {type(value).__name__}")
    if kind == "scalar":
        want = param.annotation
        ok = isinstance(value, want) or (want is float and type(value) is int) or (
            want is int and isinstance(value, (np.integer,)))
        if isinstance(value, bool) and want is not bool or not ok:
            raise TypeError(f"{where} is annotated {want.__name__}, got {type(value).__name__} {value!r}")
        return ArgSpec("scalar", dtype=SCALAR_TYPES[want])
    # tensor
    if not is_tensor_like(value):
        raise TypeError(f"{where} expects a tensor (torch, numpy or bt.Tensor), got {type(value).__name__}")
    data = unwrap(value)
    got_dtype = TORCH_TO_NAME.get(data.dtype) if isinstance(data, torch.Tensor) else _np_dtype_name(data.dtype)
    if got_dtype is None:
        raise TypeError(f"{where} has unsupported dtype {data.dtype}; supported: {', '.join(DTYPES)}")
    shape = tuple(data.shape)
    ann = param.annotation
    if param.kind == "auto":
        return ArgSpec("tensor", shape=shape, dtype=got_dtype)
    if len(shape) != ann.ndim:
        raise ValueError(f"{where} expects a {ann.ndim}-d tensor of shape {format_shape(ann.shape)}, "
                         f"got {len(shape)}-d shape {format_shape(shape)}")
    if not shape_matches(ann.shape, shape):
        raise ValueError(f"{where} expects shape {format_shape(ann.shape)}, got {format_shape(shape)}")
    if got_dtype != ann.dtype:
        raise TypeError(f"{where} expects dtype {ann.dtype}, got {got_dtype}")
    return ArgSpec("tensor", shape=ann.shape, dtype=ann.dtype)


def _np_dtype_name(dtype) -> str | None:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    return name if name in DTYPES else None


def check_symbolic_sizes(params: list[Param], values: list, fname: str) -> None:
    """The same dimension name in two parameters must mean the same size."""
    seen: dict[str, tuple[str, int]] = {}
    for param, value in zip(params, values):
        if param.kind != "tensor":
            continue
        shape = tuple(unwrap(value).shape)
        for axis, (name, size) in enumerate(zip(param.annotation.shape, shape)):
            if not isinstance(name, str):
                continue
            if name in seen and seen[name][1] != size:
                first, first_size = seen[name]
                raise ValueError(f"{fname}(): dimension '{name}' is {first_size} in parameter '{first}' "
                                 f"but {size} in parameter '{param.name}' (axis {axis})")
            seen.setdefault(name, (param.name, size))


def static_spec(param: Param) -> ArgSpec:
    """The ArgSpec of a fully annotated parameter, for compiling without arguments."""
    if param.kind == "tensor":
        return ArgSpec("tensor", shape=param.annotation.shape, dtype=param.annotation.dtype)
    if param.kind == "scalar":
        return ArgSpec("scalar", dtype=SCALAR_TYPES[param.annotation])
    raise TypeError(f"parameter '{param.name}' is not fully annotated "
                    f"({'bt.constexpr' if param.kind == 'constexpr' else 'no annotation'}); "
                    "pass example arguments to compile()")


# --------------------------------------------------------------------------------------------------
# Conversion to and from the VM (zero-copy through DLPack)
# --------------------------------------------------------------------------------------------------

def torch_to_vm(t: torch.Tensor):
    if t.is_neg():  # a lazily negated view (`x._neg_view()`): its memory holds -x, so negate for real
        t = t.resolve_neg()
    if t.numel() == 0:  # torch gives an empty tensor any strides ((3, 0): (1, 1)); TVM checks them
        compact = [1] * t.dim()
        for i in range(t.dim() - 2, -1, -1):
            compact[i] = compact[i + 1] * t.shape[i + 1]
        if list(t.stride()) != compact:
            t = torch.empty_strided(t.shape, compact, dtype=t.dtype, device=t.device)
    try:
        return tvm.runtime.from_dlpack(t)
    except Exception:
        # TVM takes only compact, 64-byte aligned memory: a fresh contiguous copy always is.
        return tvm.runtime.from_dlpack(t.contiguous() if not t.is_contiguous() else t.clone())


def vm_to_torch(t) -> torch.Tensor:
    """A VM tensor as a torch tensor sharing its memory. Handing torch the DLPack capsule skips the
    stream handshake of `torch.from_dlpack(t)`, which costs 5 µs per CUDA tensor; TVM and torch both
    launch on the default stream, so no synchronisation is needed."""
    return torch.from_dlpack(t.__dlpack__())


def numpy_to_vm(a: np.ndarray):
    return torch_to_vm(torch.from_numpy(np.ascontiguousarray(a)) if a.flags.writeable else torch.tensor(a))


def to_torch_device(device_kind: str) -> torch.device:
    return torch.device("cuda") if device_kind == "cuda" else torch.device("cpu")
