"""A call's arguments checked against the parameters' annotations (types.py), and described as the
ArgSpecs that key compiled versions and drive code generation."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ..core.types import DTYPES, SCALAR_TYPES, TORCH_TO_NAME, Param, Tensor, format_shape, shape_matches
from .layouts import Layout, layout_of


def unwrap(value):
    """A bt.Tensor value stands for its data."""
    if isinstance(value, Tensor):
        if value.data is None:
            raise ValueError(f"{value!r} has no data; set `.data = torch_tensor` before calling")
        return value.data
    return value


def is_tensor_like(value) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray, Tensor))


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """What the compiler needs to know about one argument: enough to generate code for it."""
    kind: str                 # "tensor" | "scalar" | "constexpr"
    shape: tuple = ()         # tensor: ints and symbolic names
    dtype: str = ""           # tensor / scalar element type
    value: Any = None         # constexpr value
    device: str = ""          # functions with device blocks: "cpu" or "cuda:<index>" ("" = the target's)
    # constexpr: the value's type, so that 3, 3.0 and True (equal in Python) key different versions
    value_type: str = ""
    # tensor: a permuted or broadcast view passed without a copy (layouts.py); None: compact or copied
    layout: Layout | None = None

    def __post_init__(self):
        if self.kind == "constexpr" and not self.value_type:
            object.__setattr__(self, "value_type", _type_signature(self.value))


def without_layouts(specs: tuple[ArgSpec, ...]) -> tuple[ArgSpec, ...]:
    """The specs with every tensor passed compact (copied where it is not): for the code that does not
    read a layout (backend="tir", device blocks, backwards)."""
    return tuple(dataclasses.replace(s, layout=None) if s.layout is not None else s for s in specs)


def _type_signature(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}[{','.join(_type_signature(v) for v in value)}]"
    return type(value).__qualname__


class Specialise(BaseException):
    """Code generation's signal that run-time scalar parameters reached a place that needs a
    compile-time value (a size, a dim, a slice bound): the driver compiles a version per value of
    `names` instead, as torch.compile specialises ints. A BaseException, like GeneratorExit: it is
    control flow, and must pass the visitor's and TVM's `except Exception` handlers unchanged."""

    def __init__(self, names: frozenset, error: BaseException, callee=None):
        super().__init__(", ".join(sorted(names)))
        self.names = names      # the parameters to specialise
        self.error = error      # what the code raised with them run-time (re-raised if they can't be)
        self.callee = callee    # the inlined @jit function (FunctionInfo) they belong to; None: the compiled one


def arg_spec(param: Param, value, fname: str, specialised: bool = False) -> ArgSpec:
    """Check one argument against its parameter and describe it; errors name the parameter. A
    `specialised` unannotated number is a compile-time value, keyed on (see Specialise)."""
    where = f"{fname}(): parameter '{param.name}'"
    kind = param.kind
    if kind == "constexpr":
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"{where} is bt.constexpr, so its value must be hashable; got {type(value).__name__}") from None
        return ArgSpec("constexpr", value=value)
    if kind == "auto":
        if value is None:  # an optional argument left out (`mask=None`): `if mask is not None:` folds
            return ArgSpec("constexpr", value=None)
        if is_tensor_like(value):
            kind = "tensor"
        elif type(value) in SCALAR_TYPES:
            if specialised:
                return ArgSpec("constexpr", value=value)
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
        if specialised:  # an `n: int` the code needs at compile time (codegen/specialise.py)
            return ArgSpec("constexpr", value=want(value))
        return ArgSpec("scalar", dtype=SCALAR_TYPES[want])
    return _tensor_spec(param, value, where)


def _tensor_spec(param: Param, value, where: str) -> ArgSpec:
    """A tensor argument checked against its annotation (none for an unannotated parameter)."""
    if not is_tensor_like(value):
        raise TypeError(f"{where} expects a tensor (torch, numpy or bt.Tensor), got {type(value).__name__}")
    data = unwrap(value)
    got_dtype = TORCH_TO_NAME.get(data.dtype) if isinstance(data, torch.Tensor) else _np_dtype_name(data.dtype)
    if got_dtype is None:
        raise TypeError(f"{where} has unsupported dtype {data.dtype}; supported: {', '.join(DTYPES)}")
    shape = tuple(data.shape)
    ann = param.annotation
    # a plain torch tensor only: the call key (jit.py) reads its strides, not a bt.Tensor's
    layout = layout_of(data) if isinstance(value, torch.Tensor) else None
    if param.kind == "auto":
        return ArgSpec("tensor", shape=shape, dtype=got_dtype, layout=layout)
    if len(shape) != ann.ndim:
        raise ValueError(f"{where} expects a {ann.ndim}-d tensor of shape {format_shape(ann.shape)}, "
                         f"got {len(shape)}-d shape {format_shape(shape)}")
    if not shape_matches(ann.shape, shape):
        raise ValueError(f"{where} expects shape {format_shape(ann.shape)}, got {format_shape(shape)}")
    if got_dtype != ann.dtype:
        raise TypeError(f"{where} expects dtype {ann.dtype}, got {got_dtype}")
    if layout is not None and any(isinstance(ann.shape[axis], str) for axis in layout.broadcast):
        layout = None   # broadcast inside to a size the function does not know: copied
    return ArgSpec("tensor", shape=ann.shape, dtype=ann.dtype, layout=layout)


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
