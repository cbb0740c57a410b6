"""A value of the program being written (`V`: its code, dtype, shape, and a bound on its magnitude
and error) and the rules that combine them: promotion, broadcasting, exactness."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...core.types import DTYPES


FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64")
INPUT_DTYPES = ("float32",) * 4 + ("float16", "bfloat16", "float64", "int32", "int64", "int8", "int16", "bool")
MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53, "float": 53}
EPS = {name: 2.0 ** -bits for name, bits in MANTISSA.items()}
# The largest magnitude a value may reach: well inside every dtype's range (no overflow, no inf).
LIMIT = {"float16": 1e3, "bfloat16": 1e4, "float32": 1e5, "float64": 1e6, "float": 1e6, "int8": 100,
         "int16": 1e4, "int32": 1e6, "int64": 1e6, "int": 1e6, "bool": 1}
# Tolerances a minimised program is checked with (its error bounds are the generator's, not kept).
DEFAULT_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2), "float32": (1e-4, 1e-4),
                     "float64": (1e-9, 1e-9)}
NAMES = {v: k for k, v in DTYPES.items()}
HEADER = "import torch\nimport babytriton as bt\n\n\n"


@dataclass
class V:
    """An expression of the program being written. `shape` None: a Python number (`dtype` "bool",
    "int" or "float"); else a tensor. `mag` bounds |value|; an `exact` value is a multiple of
    2**-gran, computed without rounding; an inexact one is within `err` of the true value."""
    code: str
    dtype: str
    shape: tuple | None
    mag: float = 1.0
    gran: int = 0
    exact: bool = True
    err: float = 0.0
    dims: tuple | None = None  # the shape as compiled (symbolic sizes by name); None: the shape itself
    weak: bool = False  # a 0-d tensor promoting as a Python number: a run-time scalar, arithmetic on them

    @property
    def static(self) -> bool:
        return self.dims is None or all(isinstance(d, int) for d in self.dims)

    @property
    def py(self) -> bool:
        return self.shape is None

    @property
    def number(self) -> bool:  # a Python number or a run-time scalar: no tensor operand at all
        return self.py or self.weak

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS or self.dtype == "float"

    @property
    def is_bool(self) -> bool:
        return self.dtype == "bool"

    @property
    def numeric(self) -> bool:
        return not self.is_bool

    @property
    def atom(self) -> bool:
        return self.code.isidentifier() or _is_number(self.code)


def _is_number(code: str) -> bool:
    try:
        float(code)
        return not code.startswith("-")
    except ValueError:
        return False


def paren(v: V) -> str:
    return v.code if v.atom or v.code.startswith("(") and _balanced(v.code[1:-1]) else f"({v.code})"


def _balanced(code: str) -> bool:
    depth = 0
    for ch in code:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _dummy(v: V):
    if v.py or v.weak:
        return {"bool": True, "int": 1, "float": 1.0, "int64": 1, "float64": 1.0}[v.dtype]
    return torch.empty(v.shape, dtype=DTYPES[v.dtype])


def promote(a: V, b: V, tensor: bool = False) -> str:
    """The result dtype by torch's rules (Python numbers and run-time scalars weak, as compiled); of
    two Python numbers, Python's kind (or, where the result is a `tensor` all the same, torch's
    default dtypes); of a run-time scalar and a number, Python's kind as a 0-d int64/float64 tensor."""
    if a.py and b.py and not tensor:
        return "float" if "float" in (a.dtype, b.dtype) else "int"
    if (a.py or a.weak) and (b.py or b.weak) and not tensor:
        return "float64" if any(v.dtype in ("float", "float64") for v in (a, b)) else "int64"
    return NAMES[torch.result_type(_dummy(a), _dummy(b))]


class Unfit(Exception):
    """The operands at hand don't fit an operation (e.g. shapes that don't broadcast)."""


def broadcast(*shapes) -> tuple | None:
    if all(s is None for s in shapes):
        return None  # Python numbers only
    try:
        return tuple(torch.broadcast_shapes(*[s for s in shapes if s is not None]))
    except RuntimeError:
        raise Unfit from None


def dims_of(v: V):
    return v.shape if v.dims is None else v.dims


def broadcast_dims(*values: V) -> tuple | None:
    """The compiled shape of an element-wise result: a symbolic size may meet 1 or a static size
    (then the static one wins), never another symbolic size (the compiler refuses that)."""
    shapes = [dims_of(v) for v in values if not v.py]
    if not shapes:
        return None
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(ndim):
        entries = [s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0]
        names = {e for e in entries if isinstance(e, str)}
        if len(names) > 1:
            raise Unfit
        sizes = {e for e in entries if isinstance(e, int) and e != 1}
        out.append(next(iter(sizes)) if sizes else next(iter(names)) if names else 1)
    return tuple(out) if any(isinstance(d, str) for d in out) else None


def symbolic(dims) -> tuple | None:
    dims = tuple(dims)
    return dims if any(isinstance(d, str) for d in dims) else None


def fits(dtype: str, mag: float) -> bool:
    return mag <= LIMIT[dtype]


def representable(dtype: str, mag: float, gran: int) -> bool:
    """Whether multiples of 2**-gran up to mag are exact in dtype."""
    if dtype not in MANTISSA:
        return gran == 0
    return gran + math.ceil(math.log2(mag + 1)) <= MANTISSA[dtype]


def finish(code: str, dtype: str, shape, mag: float, gran: int, exact: bool, err: float, dims,
           ulps: float = 1.0) -> V | None:
    """A new value, or None where it could overflow. Exactness ends where the dtype rounds."""
    if not fits(dtype, mag):
        return None
    if dtype == "bool":
        mag, gran = 1, 0
    if exact and not representable(dtype, mag, gran):
        exact = False
    if not exact:
        err = err + ulps * EPS.get(dtype, 0.0) * max(mag, 1e-3)
    return V(code, dtype, shape, mag, gran if exact else 0, exact, 0.0 if exact else err, dims)


def converted_err(v: V, dtype: str) -> float:
    """v's error after conversion to dtype (a narrower float rounds it)."""
    if v.exact and representable(dtype, v.mag, v.gran):
        return 0.0
    return v.err + EPS.get(dtype, 0.0) * v.mag
