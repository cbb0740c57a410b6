"""Differential fuzzing: random @jit programs, each compared with plain torch on the same inputs.

`generate(seed)` writes one program: a function over 1-4 tensors of rank 0-4 (broadcasting shapes,
size-1 axes anywhere and empty axes, a quarter of programs over wide shapes that GPU schedules take
apart, mixed dtypes, static, symbolic or no annotations, some passed as transposes, strided slices or
with torch's negative bit, some holding NaN/inf/-0.0), runtime scalars of every kind and constexprs,
built from Python's operators, library ops, torch's math in its own spellings (TORCH_MATH), reductions,
shape ops, `split`/`chunk` into pieces used afterwards, control flow and `a if c else b` on tensor
conditions; now and then instead a reduction over 4096-100000 half-precision elements
(`generate_long`). `check_file(path)` imports it (babytriton needs real source files) and runs it
three ways: translated into plain torch (testing/oracle.py: the oracle, independent of babytriton's
operator rules), compiled (twice: compiling, then the cached path; with `threads`, also from several
threads at once) and eagerly (`f.eager`, a second opinion); with `cuda`, a program that passes is
also built for CUDA (sm_90) and its source compiled by nvcc (`check_cuda`: nothing runs, no GPU). Dtypes, shapes and values
must match torch's (NaN equal to NaN); where torch raises, the compiled call must raise a clean Python
error. `minimise` shrinks a failing program (dropping statements, helpers, input views and special
values, and replacing expressions by their parts) while it fails the same way; `run_isolated` runs
programs in a child process so that one that kills it is a finding too.

No false alarms on ordinary inputs: the generator tracks, for every value, a bound on its magnitude and whether it is
computed exactly (inputs are small multiples of 1/8, so sums and products stay exact while they fit
the dtype's mantissa). Exact values must match bit for bit; inexact ones get a tolerance from an
error bound carried along with the value. Operations that jump (floor, comparisons, `//`, argmax,
casts to integers) only take exact operands, and divisors and logarithms only take values at least 1.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import itertools
import math
import os
import random
import re
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.errors import CompilationError
from ..core.types import DTYPES
from . import oracle

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


# ----------------------------------------------------------------------------------------------
# values: code, type, and what is known about the numbers
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# parameters and their arguments
# ----------------------------------------------------------------------------------------------
@dataclass
class Param:
    name: str
    kind: str          # "tensor" | "scalar" | "constexpr"
    annotation: str    # source text, "" for none
    spec: tuple        # for ARGS: ("tensor", shape, dtype) | ("scalar", type, value) | ("constexpr", value)


SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0)


def make_args(specs, seed: int) -> list:
    """Arguments from their specs, the same on every run: floats are multiples of 1/8 in [-2, 2],
    integers in [-4, 4]. A tensor spec may add a dict: "special" (the share of elements replaced by
    NaN, +-inf or -0.0), "positive" (floats in [0, 2]), "view" ("T": a transpose, "step": every
    other element of a wider tensor, "neg": a float tensor carrying torch's negative bit). A float
    scalar given as a string is that float ('nan', 'inf')."""
    gen = torch.Generator().manual_seed(seed)
    args = []
    for spec in specs:
        if spec[0] == "tensor":
            shape, dtype = tuple(spec[1]), spec[2]
            extra = spec[3] if len(spec) > 3 else {}
            view = extra.get("view")
            if view == "T":
                stored = tuple(reversed(shape))
            elif view == "step" and shape:
                stored = (*shape[:-1], 2 * shape[-1])
            else:
                stored = shape
            value = _values(stored, dtype, extra, gen)
            if view == "T":
                value = value.permute(*reversed(range(len(shape))))
            elif view == "step" and shape:
                value = value[..., ::2]
            elif view == "neg" and dtype in FLOATS:
                value = (-value)._neg_view()  # reads as `value` again, through the bit
            args.append(value)
        else:
            value = spec[-1]
            args.append(float(value) if isinstance(value, str) else value)
    return args


def _values(shape, dtype: str, extra: dict, gen) -> torch.Tensor:
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype not in FLOATS:
        return torch.randint(-4, 5, shape, generator=gen).to(DTYPES[dtype])
    value = torch.randint(0 if extra.get("positive") else -16, 17, shape, generator=gen).double() / 8
    if extra.get("special"):
        chosen = torch.rand(shape, generator=gen, dtype=torch.float64) < extra["special"]
        which = torch.randint(0, len(SPECIALS), shape, generator=gen)
        value = torch.where(chosen, torch.tensor(SPECIALS, dtype=torch.float64)[which], value)
    return value.to(DTYPES[dtype])


# ----------------------------------------------------------------------------------------------
# the generator
# ----------------------------------------------------------------------------------------------
INT_LITERALS = (0, 1, 2, 3, -1, -2)
FLOAT_LITERALS = (0.5, 1.5, -0.25, 2.0, 0.75, -1.5)


class Generator:
    """Writes one random program; every method that makes an expression returns a V or None
    (None: the operands at hand don't fit the operation; the caller tries another)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.params: list[Param] = []
        self.pool: list[V] = []     # values the next expressions may use
        self.lines: list[str] = []
        self.tokens = 0
        self.helpers: set[str] = set()   # the @jit helper functions the program calls
        self.special = False             # whether the inputs hold NaN, +-inf, -0.0 (make_params)
        self.ops = [(w, getattr(self, name)) for name, w in OPS]

    @property
    def scalar_names(self) -> set:
        return {p.name for p in self.params if p.kind == "scalar"}

    # -- parameters --------------------------------------------------------------------------
    def make_params(self):
        """1-4 tensors over one base shape (size-1 axes broadcast; now and then an empty axis), with
        static, symbolic or no annotations, some passed as views or with NaN/inf/-0.0 among their
        values; 0-2 runtime scalars of every kind; perhaps a constexpr."""
        rng = self.rng
        rank = rng.choice((1, 2, 2, 3, 3, 4)) if rng.random() < 0.2 else rng.choice((1, 2, 2, 3))
        base = [rng.randint(1, 4) if rng.random() < 0.85 else rng.randint(5, 17) for _ in range(rank)]
        if rng.random() < WIDE_SHARE:
            base = self.wide_shape(rank)
        if rng.random() < 0.07:  # an empty axis
            base[rng.randrange(rank)] = 0
        special = self.special = rng.random() < 0.15  # this program's inputs hold NaN, +-inf, -0.0
        for i in range(rng.randint(1, 4)):
            r = rng.choice(range(1, rank + 1)) if rng.random() < 0.95 else 0
            shape = tuple(1 if rng.random() < 0.25 else d for d in base[rank - r:])
            dtype = rng.choice(INPUT_DTYPES)
            style = rng.random()
            dims = shape
            if style < 0.4:
                annotation = ""
            elif style < 0.7 or not shape:
                annotation = f"bt.Tensor({shape!r}, {dtype!r})"
            else:  # symbolic sizes, one name per axis of the base shape
                dims = tuple(d if d == 1 else f"d{rank - r + j}" for j, d in enumerate(shape))
                annotation = f"bt.Tensor({dims!r}, {dtype!r})"
            extra = {}
            if special and dtype in FLOATS and rng.random() < 0.7:
                extra["special"] = rng.choice((0.05, 0.2))
            if rng.random() < 0.15:
                views = ["step"] * bool(shape) + ["T"] * (len(shape) >= 2) + ["neg"] * (dtype in FLOATS)
                if views:
                    extra["view"] = rng.choice(views)
            name = f"x{i}"
            spec = ("tensor", shape, dtype, extra) if extra else ("tensor", shape, dtype)
            self.params.append(Param(name, "tensor", annotation, spec))
            gran = 3 if dtype in FLOATS else 0
            mag = 2.0 if dtype in FLOATS else 1.0 if dtype == "bool" else 4.0
            self.pool.append(V(name, dtype, shape, mag, gran, True, 0.0, symbolic(dims)))
        for i in range(rng.choice((0, 0, 1, 1, 2))):
            # runtime scalars: Python numbers as torch sees them (weak against tensors)
            kind = rng.choice(("int", "float", "bool", "auto-int", "auto-float", "auto-bool"))
            base_kind = kind.split("-")[-1]
            value = {"int": rng.randint(-3, 3), "float": rng.randint(-8, 8) / 4, "bool": rng.random() < 0.5}[base_kind]
            if special and base_kind == "float" and rng.random() < 0.5:
                value = rng.choice(("nan", "inf", "-inf", -0.0))
            annotation = "" if kind.startswith("auto") else kind
            dtype = {"int": "int64", "float": "float64", "bool": "bool"}[base_kind]
            self.params.append(Param(f"s{i}", "scalar", annotation, ("scalar", kind, value)))
            mag = max(abs(float(value)), 1) if isinstance(value, (int, float)) else 1.0
            self.pool.append(V(f"s{i}", dtype, (), mag, 2 if base_kind == "float" else 0, weak=True))
        if rng.random() < 0.35:
            value = rng.choice((1, 2, 3, 0.5, 1.5, True))
            self.params.append(Param("k", "constexpr", "bt.constexpr", ("constexpr", value)))
            dtype = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
            self.pool.append(V("k", dtype, None, max(abs(value), 1), 1))

    def wide_shape(self, rank: int) -> list[int]:
        """Sizes GPU schedules take apart (vectors, warps, blocks, ragged tails): a wide innermost axis,
        outer axes up to 64, at most WIDE_ELEMENTS elements in all."""
        rng = self.rng
        shape = [rng.choice(WIDE_OUTER) for _ in range(rank - 1)] + [rng.choice(WIDE_INNER)]
        while math.prod(shape) > WIDE_ELEMENTS:
            axis = max(range(rank - 1), key=lambda i: shape[i]) if rank > 1 and max(shape[:-1]) > 1 else rank - 1
            shape[axis] = max(shape[axis] // 2, 1)
        return shape

    # -- statements ------------------------------------------------------------------------------
    def statement(self, name: str) -> list[str]:
        """One statement: `name = expr`, `a, b = e1, e2`, or `v += expr` on an earlier variable."""
        rng = self.rng
        locals_ = [v for v in self.pool if v.code.startswith("v") and not v.py and v.numeric]
        choice = rng.random()
        if locals_ and choice < 0.15:
            target = rng.choice(locals_)
            e = self.expr(rng.randint(0, 2))
            op = rng.choice("+-*")
            try:
                result = e is not None and e.numeric and self.combine(op, target, e)
            except Unfit:
                result = None
            if result and result.dtype == target.dtype and result.shape == target.shape and \
                    dims_of(result) == dims_of(target):
                self.pool = [v for v in self.pool if v is not target]
                self.pool.append(dataclasses.replace(result, code=target.code))
                return [f"    {target.code} {op}= {e.code}"]
        if choice < 0.35:
            lines = (self.if_statement if rng.random() < 0.5 else self.loop_statement)(name)
            if lines:
                return lines
        if choice < 0.41:
            lines = self.split_statement(name)
            if lines:
                return lines
        if choice < 0.5:
            first, second = self.expr(rng.randint(1, 2)), self.expr(rng.randint(1, 2))
            if first is not None and second is not None:
                self.pool += [dataclasses.replace(first, code=f"{name}a"), dataclasses.replace(second, code=f"{name}b")]
                return [f"    {name}a, {name}b = {first.code}, {second.code}"]
        v = self.expr(rng.randint(1, 3))
        if v is None:
            return []
        self.pool.append(dataclasses.replace(v, code=name))
        return [f"    {name} = {v.code}"]

    def split_statement(self, name: str) -> list[str]:
        """`va, vb = x.split(k, dim=d)` (or torch.chunk, torch.split with sizes) along a static axis,
        both pieces kept; often then one piece times a math function of the other (a GEGLU)."""
        rng = self.rng
        x = self.tensor_operand(1, lambda v: any(isinstance(e, int) and e >= 2 for e in dims_of(v)))
        if x is None:
            return []
        d = dims_of(x)
        axis = rng.choice([i for i, e in enumerate(d) if isinstance(e, int) and e >= 2])
        n, spelled_axis = x.shape[axis], rng.choice((axis, axis - len(d)))
        style = rng.choice(("chunk", "chunk-method", "split", "split-sizes"))
        k = -(-n // 2) if style != "split-sizes" else rng.randint(1, n - 1)
        code = {"chunk": f"torch.chunk({x.code}, 2, {spelled_axis})",
                "chunk-method": f"{paren(x)}.chunk(2, dim={spelled_axis})",
                "split": f"{paren(x)}.split({k}, dim={spelled_axis})",
                "split-sizes": f"torch.split({x.code}, [{k}, {n - k}], dim={spelled_axis})"}[style]
        pieces = []
        for suffix, size in (("a", k), ("b", n - k)):
            shape = tuple(size if i == axis else e for i, e in enumerate(x.shape))
            dims = symbolic(size if i == axis else e for i, e in enumerate(d))
            pieces.append(dataclasses.replace(x, code=f"{name}{suffix}", shape=shape, dims=dims))
        self.pool += pieces
        lines = [f"    {name}a, {name}b = {code}"]
        gate = self.math_of(pieces[1]) if rng.random() < 0.6 else None
        try:
            gated = gate is not None and self.combine(rng.choice("*+"), pieces[0], gate)
        except Unfit:  # the pieces differ in size (an odd length): no product of the two
            gated = None
        if gated:
            self.pool.append(dataclasses.replace(gated, code=name))
            lines.append(f"    {name} = {gated.code}")
        return lines

    # -- control flow ----------------------------------------------------------------------------
    def runtime_condition(self) -> V | None:
        """A 0-d bool tensor, known exactly: a bool scalar, or a comparison of whole-tensor reductions."""
        scalars = [v for v in self.pool if v.is_bool and (v.shape == () or v.code in self.scalar_names)]
        if scalars and self.rng.random() < 0.3:
            return self.rng.choice(scalars)
        a = self.tensor_operand(1, lambda v: v.exact and v.numeric and v.shape != ())
        if a is None:
            return None
        reduced = V(f"{paren(a)}.{self.rng.choice(('sum', 'max', 'min'))}()", "int64" if not a.is_float else a.dtype,
                    (), a.mag * max(math.prod(a.shape), 1), a.gran, representable(a.dtype, a.mag * 64, a.gran))
        if not reduced.exact:
            return None
        other = self.literal(self.rng.choice(("int", "float")))
        return V(f"{reduced.code} {self.rng.choice(('>', '<=', '>=', '<'))} {other.code}", "bool", ())

    def compile_time_condition(self) -> V | None:
        constexprs = [v for v in self.pool if v.py and v.code.isidentifier()]
        if constexprs and self.rng.random() < 0.6:
            return V(f"{self.rng.choice(constexprs).code} > 1", "bool", None)
        n = self.compile_time_int()
        return V(f"{n.code} > 2", "bool", None)

    def branch_values(self) -> tuple[V, V] | None:
        """Two tensor values of one dtype and shape, one per path of an `if`."""
        first = self.expr(self.rng.randint(1, 2))
        if first is None or first.py:
            return None
        for _ in range(8):
            second = self.expr(self.rng.randint(0, 2)) if self.rng.random() < 0.7 else self.rng.choice(self.pool)
            if second is not None and not second.py and second.dtype == first.dtype and \
                    second.shape == first.shape and dims_of(second) == dims_of(first):
                return first, second
        return None

    def if_statement(self, name: str) -> list[str]:
        """`if`/`elif`/`else`, decided at run time (a tensor condition) or while compiling. Every path
        assigns `name` a tensor of one dtype and shape (paths that disagree are refused, or, for
        numbers, merged as compiled code merges them: see babytriton/eager/reference.py)."""
        conds = [self.runtime_condition() if self.rng.random() < 0.75 else self.compile_time_condition()
                 for _ in range(self.rng.choice((1, 1, 2)))]
        if any(c is None for c in conds):
            return []
        values = [self.branch_values() for _ in conds]
        if any(v is None for v in values):
            return []
        paths = [values[0][0], values[0][1]] + [v[0] for v in values[1:]]
        if any(p.dtype != paths[0].dtype or p.shape != paths[0].shape or dims_of(p) != dims_of(paths[0])
               for p in paths):
            return []
        lines = [f"    if {conds[0].code}:", f"        {name} = {paths[0].code}"]
        for cond, value in zip(conds[1:], paths[2:]):
            lines += [f"    elif {cond.code}:", f"        {name} = {value.code}"]
        lines += ["    else:", f"        {name} = {paths[1].code}"]
        merged = V(name, paths[0].dtype, paths[0].shape, max(p.mag for p in paths), max(p.gran for p in paths),
                   all(p.exact for p in paths), max(p.err for p in paths), paths[0].dims)
        self.pool.append(merged)
        return lines

    def loop_statement(self, name: str) -> list[str]:
        """`name` accumulated over a loop: unrolled (a short constant range), a recursive function (a
        long range, a runtime bound, a `while`), perhaps with `break` or `continue`."""
        rng = self.rng
        acc = self.tensor_operand(1, lambda v: v.numeric)
        if acc is None:
            return []
        e = self.expr(rng.randint(0, 2))
        if e is None or not e.numeric:
            return []
        ints = [p for p in self.params if p.kind == "scalar" and p.spec[1] in ("int", "auto-int")
                and isinstance(p.spec[2], int)]
        kind = rng.choice(("unrolled", "unrolled", "recursive", "runtime", "while"))
        if kind == "runtime" and not ints:
            kind = "unrolled"
        trips = {"unrolled": rng.randint(0, 5), "recursive": rng.randint(17, 24), "while": rng.randint(0, 5),
                 "runtime": max(ints[0].spec[2], 0) if ints else 0}[kind]
        header = {"unrolled": f"for i in range({trips}):", "recursive": f"for i in range({trips}):",
                  "runtime": f"for i in range({ints[0].name if ints else 0}):", "while": f"while c < {trips}:"}[kind]
        # i: a Python int in an unrolled loop, a 0-d int64 tensor in a recursive one; with a tensor
        # it promotes the same way either way
        use_index = kind != "while" and not e.py and rng.random() < 0.3
        term = V(f"{paren(e)} * i", e.dtype, e.shape, e.mag * max(trips, 1), e.gran,
                 e.exact, e.err * trips, e.dims) if use_index else e
        op = rng.choice(("+", "-", "maximum"))
        try:
            step = self.combine(op, acc, term) if op != "maximum" else \
                finish(f"maximum({name}, {term.code})", promote(acc, term), broadcast(acc.shape, term.shape),
                       max(acc.mag, term.mag), max(acc.gran, term.gran), acc.exact and term.exact,
                       max(acc.err, term.err), broadcast_dims(acc, term))
        except Unfit:
            return []
        if step is None or step.dtype != acc.dtype or step.shape != acc.shape or dims_of(step) != dims_of(acc):
            return []
        stop = rng.randint(0, max(trips - 1, 0)) if kind != "while" and trips and rng.random() < 0.25 else None
        exit_kind = rng.choice(("break", "continue")) if stop is not None else None
        n = trips if exit_kind != "break" else stop
        grown = finish(name, acc.dtype, acc.shape, acc.mag + n * term.mag, max(acc.gran, term.gran),
                       acc.exact and term.exact, acc.err + n * term.err, acc.dims, ulps=n + 1)
        if grown is None:
            return []
        body = step.code.replace(paren(acc), name, 1) if op != "maximum" else step.code
        lines = [f"    {name} = {acc.code}"]
        if kind == "while":
            lines.append(f"    c = zeros((), 'int64')")
        lines.append(f"    {header}")
        if exit_kind:
            lines += [f"        if i == {stop}:", f"            {exit_kind}"]
        lines.append(f"        {name} = {body}" if op == "maximum" else f"        {name} = {name} {op} {paren(term)}")
        if kind == "while":
            lines.append("        c = c + 1")
        self.pool.append(grown)
        return lines

    # -- choosing operands ---------------------------------------------------------------------
    def literal(self, kind: str | None = None) -> V:
        kind = kind or self.rng.choice(("int", "int", "float", "float", "bool"))
        if kind == "int":
            value = self.rng.choice(INT_LITERALS)
            return V(repr(value) if value >= 0 else f"({value})", "int", None, max(abs(value), 1), 0)
        if kind == "float":
            value = self.rng.choice(FLOAT_LITERALS)
            return V(repr(value) if value >= 0 else f"({value})", "float", None, abs(value), 2)
        return V(repr(self.rng.random() < 0.5), "bool", None, 1, 0)

    def compile_time_int(self) -> V:
        """An int known at compile time: a literal, x.shape[i], len(x), x.ndim."""
        static = [v for v in self.pool if not v.py and v.static and v.shape and v.code.isidentifier()]
        choice = self.rng.random()
        if static and choice < 0.3:
            v = self.rng.choice(static)
            axis = self.rng.randrange(len(v.shape))
            return V(f"{v.code}.shape[{axis}]", "int", None, max(v.shape[axis], 1), 0)
        if static and choice < 0.4:
            v = self.rng.choice(static)
            return V(f"len({v.code})", "int", None, max(v.shape[0], 1), 0)
        if static and choice < 0.45:
            v = self.rng.choice(static)
            return V(f"{v.code}.ndim", "int", None, max(len(v.shape), 1), 0)
        return self.literal("int")

    def operand(self, depth: int) -> V:
        rng = self.rng
        if depth > 0 and rng.random() < 0.45:
            v = self.expr(depth - 1)
            if v is not None:
                return v
        if rng.random() < 0.15:
            return self.compile_time_int() if rng.random() < 0.5 else self.literal()
        return rng.choice(self.pool)

    def tensor_operand(self, depth: int, want=lambda v: True) -> V | None:
        for _ in range(6):
            v = self.operand(depth)
            if not (v.py or v.weak) and want(v):  # a run-time scalar is a Python number, not a tensor
                return v
        candidates = [v for v in self.pool if not (v.py or v.weak) and want(v)]
        return self.rng.choice(candidates) if candidates else None

    def float_operand(self, depth: int) -> V | None:
        v = self.tensor_operand(depth, lambda v: True)
        if v is None:
            return None
        return v if v.is_float else self.cast(v, self.rng.choice(("float32", "float32", "float64", "float16")))

    def expr(self, depth: int) -> V | None:
        for _ in range(20):
            weights, makers = zip(*self.ops)
            maker = self.rng.choices(makers, weights)[0]
            try:
                v = maker(depth)
            except (Unfit, OverflowError, ZeroDivisionError):  # a bound past float range; an empty axis
                continue
            if v is not None:
                return v
        return None

    # -- Python operators ----------------------------------------------------------------------
    def arith(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if not (a.numeric and b.numeric) or a.py and b.py and self.rng.random() < 0.7:
            return None
        return self.combine(self.rng.choice("+-*"), a, b)

    def combine(self, op: str, a: V, b: V) -> V | None:
        """`a op b` for op in + - *."""
        dtype = promote(a, b)
        ea, eb = converted_err(a, dtype), converted_err(b, dtype)
        if op == "*":
            mag, gran, err = a.mag * b.mag, a.gran + b.gran, a.mag * eb + b.mag * ea + ea * eb
        else:
            mag, gran, err = a.mag + b.mag, max(a.gran, b.gran), ea + eb
        exact = a.exact and b.exact and ea == 0 and eb == 0
        result = finish(f"{paren(a)} {op} {paren(b)}", dtype, broadcast(a.shape, b.shape), mag, gran, exact, err,
                        broadcast_dims(a, b))
        if result is not None and (a.weak or b.weak) and (a.py or a.weak) and (b.py or b.weak):
            result.weak = True  # arithmetic on run-time scalars and numbers: still a Python number
        return result

    def divide(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if not (a.numeric and b.numeric) or a.number and b.number:
            return None
        # `abs(s) + 1` of a run-time scalar is still a Python number (library.on_numbers_only)
        divisor = V(f"(abs({b.code}) + 1)", b.dtype, b.shape, b.mag + 1, b.gran, b.exact, b.err, b.dims, b.weak)
        dtype = promote(a, divisor)
        if dtype not in FLOATS:
            dtype = "float32"  # true division
        err = converted_err(a, dtype) + a.mag * converted_err(divisor, dtype)
        return finish(f"{paren(a)} / {divisor.code}", dtype, broadcast(a.shape, b.shape), a.mag, 0, False, err,
                      broadcast_dims(a, b), ulps=2)

    def floor_div_mod(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if not (a.numeric and b.numeric and a.exact and b.exact) or a.number and b.number:
            return None
        divisor = V(f"(abs({b.code}) + 1)", b.dtype, b.shape, b.mag + 1, b.gran, True, 0.0, b.dims, b.weak)
        dtype = promote(a, divisor)
        # A rounded half-precision quotient can land on an integer that the exact one is just below.
        if dtype in ("float16", "bfloat16") or converted_err(a, dtype) or converted_err(divisor, dtype):
            return None
        if self.rng.random() < 0.5:
            return finish(f"{paren(a)} // {divisor.code}", dtype, broadcast(a.shape, b.shape), a.mag + 1, 0,
                          True, 0.0, broadcast_dims(a, b))
        return finish(f"{paren(a)} % {divisor.code}", dtype, broadcast(a.shape, b.shape), divisor.mag,
                      max(a.gran, b.gran), True, 0.0, broadcast_dims(a, b))

    def power(self, depth):
        a = self.tensor_operand(depth, lambda v: v.numeric)
        if a is None:
            return None
        k = self.rng.choice((0, 1, 2, 2, 3))
        exact = a.exact and not a.is_float  # TVM's float pow need not be x*x exactly
        err = (a.err * k * a.mag ** max(k - 1, 0)) if a.is_float else 0.0
        return finish(f"{paren(a)} ** {k}", a.dtype, a.shape, max(a.mag, 1) ** k, a.gran * k, exact, err, a.dims,
                      ulps=4)

    def negate(self, depth):
        a = self.tensor_operand(depth, lambda v: v.numeric)
        if a is None:
            return None
        return dataclasses.replace(a, code=f"-{paren(a)}")

    def compare(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if not (a.exact and b.exact) or a.number and b.number:
            return None
        dtype = promote(a, b)
        if converted_err(a, dtype) or converted_err(b, dtype):
            return None
        op = self.rng.choice(("<", "<=", ">", ">=", "==", "!="))
        if self.rng.random() < 0.15:  # a chain: a < b < c
            c = self.operand(depth)
            if c.exact and not converted_err(c, promote(b, c)) and not (c.number and b.number):
                op2 = self.rng.choice(("<", "<=", ">"))
                return V(f"{paren(a)} {op} {paren(b)} {op2} {paren(c)}", "bool", broadcast(a.shape, b.shape, c.shape),
                         dims=broadcast_dims(a, b, c))
        return V(f"{paren(a)} {op} {paren(b)}", "bool", broadcast(a.shape, b.shape), dims=broadcast_dims(a, b))

    def condition(self, depth) -> V | None:
        """A bool tensor: one at hand, or a comparison."""
        a = self.tensor_operand(depth, lambda v: v.is_bool) if self.rng.random() < 0.5 else None
        for _ in range(4):
            if a is not None and not a.py:
                return a
            try:
                a = self.compare(depth)
            except Unfit:
                a = None
        return None

    def logical(self, depth):
        a = self.condition(depth)
        if a is None:
            return None
        if self.rng.random() < 0.25:
            return V(f"not {paren(a)}", "bool", a.shape, dims=a.dims)
        b = self.condition(depth) if self.rng.random() < 0.8 else self.literal("bool")
        if b is None:
            return None
        op = self.rng.choice(("and", "or"))
        return V(f"{paren(a)} {op} {paren(b)}", "bool", broadcast(a.shape, b.shape), dims=broadcast_dims(a, b))

    def bitwise(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if a.is_float or b.is_float or a.number and b.number:
            return None
        dtype = promote(a, b)
        if self.rng.random() < 0.2:
            mag = a.mag + 1
            return finish(f"~{paren(a)}", a.dtype, a.shape, mag, 0, True, 0.0, a.dims) if not a.py else None
        op = self.rng.choice("&|^")
        mag = 2 ** math.ceil(math.log2(max(a.mag, b.mag) + 1)) * 2
        return finish(f"{paren(a)} {op} {paren(b)}", dtype, broadcast(a.shape, b.shape), mag, 0, True, 0.0,
                      broadcast_dims(a, b))

    def ifexp(self, depth):
        cond = self.condition(depth)
        if cond is None:
            return None
        a, b = self.operand(depth), self.operand(depth)
        if a.number and b.number and a.dtype != b.dtype:
            return None
        dtype = promote(a, b, tensor=True)
        exact = a.exact and b.exact and not converted_err(a, dtype) and not converted_err(b, dtype)
        err = max(converted_err(a, dtype), converted_err(b, dtype))
        code = f"{paren(a)} if {paren(cond)} else {paren(b)}"
        if self.rng.random() < 0.4:
            code = f"where({cond.code}, {a.code}, {b.code})"
        return finish(code, dtype, broadcast(cond.shape, a.shape, b.shape), max(a.mag, b.mag), max(a.gran, b.gran),
                      exact, err, broadcast_dims(cond, a, b))

    def compile_time_branch(self, depth):
        """`a if k > 1 else b` on a constexpr: decided while compiling."""
        ks = [v for v in self.pool if v.py]
        if not ks:
            return None
        k = self.rng.choice(ks)
        a, b = self.operand(depth), self.operand(depth)
        taken = a  # the generator doesn't know k's value here: both sides must be the same kind
        if a.py != b.py or a.dtype != b.dtype or a.shape != b.shape:
            return None
        mag = max(a.mag, b.mag)
        return V(f"{paren(a)} if {k.code} > 1 else {paren(b)}", taken.dtype, taken.shape, mag, max(a.gran, b.gran),
                 a.exact and b.exact, max(a.err, b.err), a.dims if a.dims == b.dims else None)

    def call_helper(self, depth):
        """A call of another @jit function (inlined when compiled); numbers reach it as the weak 0-d
        int64/float64 tensors a direct call passes."""
        a, b = self.operand(depth), self.operand(depth)
        if not (a.numeric and b.numeric):
            return None
        a, b = as_argument(a), as_argument(b)
        name = self.rng.choice(sorted(HELPERS))
        body, model = HELPERS[name]
        result = model(a, b)
        if result is None:
            return None
        mag, gran, exact, err = result
        self.helpers.add(name)
        return finish(f"{name}({a.code}, {b.code})", promote(a, b), broadcast(a.shape, b.shape), mag, gran, exact,
                      err, broadcast_dims(a, b), ulps=2)

    # -- library ops ---------------------------------------------------------------------------
    def fresh(self) -> str:
        """A symbolic size that is none of the others (e.g. a flattened symbolic shape)."""
        self.tokens += 1
        return f"?{self.tokens}"

    def spelled(self, name: str, *args: str, **kwargs: str) -> str:
        """A library call, by any of its names: bare, bt., or R. (Relax's own)."""
        prefix = self.rng.choice(("", "", "bt.")) if name in BT_OPS else ""
        text = ", ".join([*args, *(f"{k}={v}" for k, v in kwargs.items())])
        return f"{prefix}{name}({text})"

    def unary_float(self, depth):
        a = self.float_operand(depth)
        if a is None:
            return None
        name, (rule, slope, ulps) = self.rng.choice(list(UNARY_FLOAT.items()))
        arg = a.code
        if rule == "at-least-1":  # log(abs(x) + 1), sqrt, rsqrt: away from 0
            arg = f"abs({a.code}) + 1"
        if name == "exp" and a.mag > 5:
            return None
        if a.mag > 1e4:
            return None
        mag = {"exp": lambda m: math.exp(m), "log": lambda m: math.log(m + 1) + 1, "sqrt": lambda m: math.sqrt(m + 1),
               "gelu": lambda m: m + 1, "silu": lambda m: m + 1}.get(name, lambda m: 1.0)(a.mag)
        err = a.err * (mag if name == "exp" else slope)
        return finish(self.spelled(name, arg), a.dtype, a.shape, mag, 0, False, err, a.dims, ulps=ulps)

    def torch_math(self, depth):
        """A math function in one of torch's spellings (torch.X, x.X(), torch.nn.functional.X): every
        one the library has, each on the part of its domain where its error is bounded (TORCH_MATH)."""
        a = self.tensor_operand(depth, lambda v: v.numeric)
        return None if a is None else self.math_of(a)

    def math_of(self, a: V, name: str | None = None) -> V | None:
        """`name(a)` (a random TORCH_MATH entry where None); integer tensors become float32 under
        torch.X, as torch's rule is; the others take a float cast first."""
        name = name or self.rng.choice(list(TORCH_MATH))
        domain, slope, bound, ulps, spellings = TORCH_MATH[name]
        if not a.is_float and not (name in INT_TO_FLOAT and a.dtype in INTS):
            a = self.cast(a, self.rng.choice(("float32", "float16", "bfloat16")))
            if a is None:
                return None
        if a.mag > DOMAIN_LIMIT.get(domain, 1e4):
            return None
        dtype = a.dtype if a.is_float else "float32"
        arg = DOMAINS[domain].format(x=a.code)
        m = {"pos": a.mag + 1, "pos1.5": a.mag + 1.5, "unit": min(a.mag, 0.875)}.get(domain, a.mag)
        code = self.rng.choice(spellings).format(x=paren(V(arg, "", ())))
        if slope == "exact":  # a clamp or a replacement of NaN and inf: exact where its input is
            return finish(code, dtype, a.shape, bound(m), a.gran, a.exact, a.err, a.dims)
        err = converted_err(a, dtype) * (bound(m) if slope is None else slope)
        return finish(code, dtype, a.shape, bound(m), 0, False, err, a.dims, ulps=ulps)

    def binary_math(self, depth):
        """torch's two-operand math: atan2, hypot, logaddexp, fmax/fmin (NaN-ignoring), lerp."""
        a, b = self.float_operand(depth), self.float_operand(depth)
        if a is None or b is None or a.mag > 1e3 or b.mag > 1e3:
            return None
        name = self.rng.choice(("atan2", "hypot", "logaddexp", "fmax", "fmin", "lerp"))
        dtype = promote(a, b)
        ea, eb = converted_err(a, dtype), converted_err(b, dtype)
        shape, dims = broadcast(a.shape, b.shape), broadcast_dims(a, b)
        if name == "atan2":  # a positive second operand: no branch cut, |derivatives| <= 1
            return finish(f"torch.atan2({a.code}, abs({b.code}) + 1)", dtype, shape, 1.6, 0, False, ea + eb,
                          dims, ulps=8)
        if name in ("fmax", "fmin"):
            return finish(f"torch.{name}({a.code}, {b.code})", dtype, shape, max(a.mag, b.mag),
                          max(a.gran, b.gran), a.exact and b.exact and not ea and not eb, max(ea, eb), dims)
        if name == "lerp":  # torch.lerp takes one dtype: the end is converted (exactly, or within eb)
            if a.dtype != b.dtype and not (b := self.cast(b, a.dtype)):
                return None
            return finish(f"torch.lerp({a.code}, {b.code}, 0.25)", a.dtype, shape, max(a.mag, b.mag), 0, False,
                          a.err + b.err, dims, ulps=4)
        mag = a.mag + b.mag if name == "hypot" else max(a.mag, b.mag) + 1
        return finish(f"torch.{name}({a.code}, {b.code})", dtype, shape, mag, 0, False, ea + eb, dims, ulps=4)

    def unary_exact(self, depth):
        a = self.tensor_operand(depth, lambda v: v.numeric)
        if a is None:
            return None
        name = self.rng.choice(("abs", "relu", "negative", "square", "floor", "ceil", "round", "sign", "clip"))
        if name in ("relu",) and not a.is_float or name in ("floor", "ceil", "round", "sign") and not a.exact:
            return None
        if name == "square":
            return finish(self.spelled(name, a.code), a.dtype, a.shape, a.mag ** 2, 2 * a.gran, a.exact,
                          2 * a.mag * a.err, a.dims)
        if name == "clip":
            lo, hi = sorted(self.rng.sample((-2, -1, 0, 1, 2, 3), 2))
            if a.is_float and self.rng.random() < 0.5:
                lo, hi = lo / 2, hi / 2
            return dataclasses.replace(a, code=self.spelled("clip", a.code, repr(lo), repr(hi)),
                                       mag=max(abs(lo), abs(hi)), gran=max(a.gran, 1))
        if name in ("floor", "ceil", "round", "sign"):
            return finish(self.spelled(name, a.code), a.dtype, a.shape, a.mag + 1, 0, True, 0.0, a.dims)
        return dataclasses.replace(a, code=self.spelled(name, a.code))

    def binary_op(self, depth):
        a, b = self.operand(depth), self.operand(depth)
        if not (a.numeric and b.numeric) or a.number and b.number:
            return None
        name = self.rng.choice(("maximum", "minimum", "add", "multiply", "subtract"))
        dtype = promote(a, b)
        ea, eb = converted_err(a, dtype), converted_err(b, dtype)
        exact = a.exact and b.exact and not ea and not eb
        if name == "multiply":
            mag, gran, err = a.mag * b.mag, a.gran + b.gran, a.mag * eb + b.mag * ea
        elif name in ("add", "subtract"):
            mag, gran, err = a.mag + b.mag, max(a.gran, b.gran), ea + eb
        else:
            mag, gran, err = max(a.mag, b.mag), max(a.gran, b.gran), max(ea, eb)
        return finish(self.spelled(name, a.code, b.code), dtype, broadcast(a.shape, b.shape), mag, gran, exact, err,
                      broadcast_dims(a, b))

    def reduction(self, depth):
        a = self.tensor_operand(depth, lambda v: len(v.shape) >= 1)
        if a is None:
            return None
        name = self.rng.choice(("sum", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "std", "variance"))
        rank = len(a.shape)
        choice = self.rng.random()
        if choice < 0.3:
            axis, axes = None, list(range(rank))
        elif choice < 0.8 or rank == 1:
            axis = self.rng.randrange(-rank, rank)
            axes = [axis % rank]
        else:
            axes = sorted(self.rng.sample(range(rank), 2))
            axis = tuple(axes)
        if name in ("argmax", "argmin") and isinstance(axis, tuple):
            return None
        keepdims = self.rng.random() < 0.3
        n = math.prod(a.shape[i] for i in axes)
        shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape)) if keepdims else \
            tuple(d for i, d in enumerate(a.shape) if i not in axes)
        if name in ("std", "variance", "mean") and not a.is_float:
            return None
        if name in ("argmax", "argmin") and not a.exact:
            return None
        if name == "prod" and (n > 4 or a.mag > 3):
            return None
        dtype = "int64" if name in ("sum", "prod") and not a.is_float or name in ("argmax", "argmin") else a.dtype
        mag = {"sum": n * a.mag, "prod": max(a.mag, 1) ** n if name == "prod" else 0, "mean": a.mag, "max": a.mag,
               "min": a.mag, "argmax": n, "argmin": n, "std": a.mag, "variance": a.mag ** 2}[name]
        gran = {"sum": a.gran, "prod": a.gran * n, "max": a.gran, "min": a.gran}.get(name, 0)
        exact = a.exact and name in ("sum", "prod", "max", "min", "argmax", "argmin")
        err = {"sum": n * a.err, "prod": n * a.err * a.mag ** max(n - 1, 0), "variance": 2 * a.mag * a.err}.get(name, a.err)
        options = {}
        if axis is not None or self.rng.random() < 0.2:
            options["axis" if self.rng.random() < 0.8 else "dim"] = repr(axis)
        if keepdims:
            options["keepdims" if self.rng.random() < 0.8 else "keepdim"] = "True"
        text = ", ".join(f"{k}={v}" for k, v in options.items())
        style = self.rng.random()
        if name in ("std", "variance") or style < 0.5:
            code = self.spelled(name, a.code, **options)
        else:  # the tensor method
            text = ", ".join(f"{k}={v}" for k, v in method_keywords(name, axis, options).items())
            code = f"{paren(a)}.{name}({text})"
        d = dims_of(a)
        dims = [1 if i in axes else d[i] for i in range(rank)] if keepdims else \
            [d[i] for i in range(rank) if i not in axes]
        return finish(code, dtype, shape, mag, gran, exact, err * n if name == "mean" else err, symbolic(dims),
                      ulps=2 * n)

    def library_misc(self, depth):
        """Library ops beyond the common ones: running sums, shifts, logical xor, leaky relu, norms."""
        a = self.tensor_operand(depth, lambda v: len(v.shape) >= 1)
        if a is None:
            return None
        name = self.rng.choice(("cumsum", "shift", "logical_xor", "leakyrelu", "relu6", "trunc", "layer_norm",
                                "rms_norm", "isfinite"))
        rank = len(a.shape)
        if name == "cumsum" and a.numeric:
            axis = self.rng.randrange(-rank, rank)
            n = a.shape[axis]
            dtype = a.dtype if a.is_float else "int64"
            return finish(f"cumsum({a.code}, axis={axis})", dtype, a.shape, n * a.mag, a.gran, a.exact, n * a.err,
                          a.dims, ulps=2 * n)
        if name == "shift" and a.dtype in INTS and a.exact:
            k = self.rng.randint(0, 2)
            op = self.rng.choice(("left_shift", "right_shift"))
            mag = a.mag * 2 ** k if op == "left_shift" else a.mag
            if op == "left_shift" and a.mag * 2 ** k > LIMIT[a.dtype]:
                return None
            return finish(f"{op}({a.code}, {k})", a.dtype, a.shape, mag + 1, 0, True, 0.0, a.dims)
        if name == "logical_xor":
            b = self.condition(depth)
            if b is None:
                return None
            return V(f"logical_xor({a.code}, {b.code})", "bool", broadcast(a.shape, b.shape),
                     dims=broadcast_dims(a, b)) if a.exact else None
        if name == "leakyrelu" and a.is_float:
            return dataclasses.replace(a, code=f"leakyrelu({a.code}, 0.25)", gran=a.gran + 2)
        if name == "relu6" and a.is_float:
            return dataclasses.replace(a, code=f"relu6({a.code})", mag=min(a.mag, 6.0))
        if name == "trunc" and a.is_float and a.exact:
            return dataclasses.replace(a, code=f"trunc({a.code})", gran=0)
        if name == "isfinite" and a.numeric:
            return V(f"isfinite({a.code})", "bool", a.shape, dims=a.dims)
        if name in ("layer_norm", "rms_norm") and a.dtype != "float64" and a.is_float and a.exact and a.dims is None:
            n = a.shape[-1]
            weight = f"ones(({n},), {a.dtype!r})"
            code = f"layer_norm({a.code}, {weight}, zeros(({n},), {a.dtype!r}), -1)" if name == "layer_norm" \
                else f"rms_norm({a.code}, {weight})"
            # normalised values reach sqrt(n); near-constant rows make them sensitive: only exact inputs
            return finish(code, a.dtype, a.shape, math.sqrt(n) + 1, 0, False, 0.0, None, ulps=64 * n)
        return None

    def softmax(self, depth):
        a = self.float_operand(depth)
        if a is None or not a.shape:
            return None
        axis = self.rng.randrange(-len(a.shape), len(a.shape))
        name = self.rng.choice(("softmax", "log_softmax"))
        mag = 1.0 if name == "softmax" else 2 * a.mag + math.log(8) + 1
        return finish(self.spelled(name, a.code, axis=repr(axis)), a.dtype, a.shape, mag, 0, False, 2 * a.err,
                      a.dims, ulps=8)

    def cast(self, a: V, dtype: str) -> V | None:
        if dtype in INTS and not (a.exact and fits(dtype, a.mag)) or dtype == "bool" and not a.exact:
            return None
        if dtype in INTS and a.is_float and self.special:  # NaN and inf as integers: undefined (README)
            return None
        style = self.rng.random()
        text = repr(dtype) if self.rng.random() < 0.8 else f"torch.{dtype}"
        code = f"{paren(a)}.astype({text})" if style < 0.6 else f"astype({a.code}, {text})"
        exact = a.exact and representable(dtype, a.mag, a.gran)
        mag = a.mag + 1 if dtype in INTS else a.mag
        return finish(code, dtype, a.shape, mag, a.gran if dtype not in INTS else 0, exact,
                      converted_err(a, dtype) if dtype in FLOATS else 0.0, a.dims)

    def astype(self, depth):
        a = self.tensor_operand(depth)
        if a is None:
            return None
        return self.cast(a, self.rng.choice(INPUT_DTYPES))

    def matmul(self, depth):
        a = self.tensor_operand(depth, lambda v: len(v.shape) in (1, 2) and (v.is_float or v.dtype in ("int32", "int64")))
        if a is None:
            return None
        d = dims_of(a)
        if len(a.shape) == 1:
            left, right, shape, k, dims = a.code, a.code, (), a.shape[0], ()
        elif self.rng.random() < 0.5:
            left, right, shape, k, dims = a.code, f"{paren(a)}.T", (a.shape[0], a.shape[0]), a.shape[1], (d[0], d[0])
        else:
            left, right, shape, k, dims = (f"permute_dims({a.code})", a.code, (a.shape[1], a.shape[1]), a.shape[0],
                                           (d[1], d[1]))
        if max(math.prod(shape), 1) * k > MATMUL_WORK:
            return None
        code = f"{paren(V(left, '', ()))} @ {paren(V(right, '', ()))}" if self.rng.random() < 0.7 \
            else f"matmul({left}, {right})"
        return finish(code, a.dtype, shape, k * a.mag ** 2, 2 * a.gran, a.exact, 2 * k * a.mag * a.err,
                      symbolic(dims), ulps=2 * k)

    def shape_op(self, depth):
        a = self.tensor_operand(depth)
        if a is None:
            return None
        rank = len(a.shape)
        d = dims_of(a)
        choice = self.rng.choice(("flatten", "reshape", "expand_dims", "squeeze", "T", "permute", "broadcast",
                                  "concat", "stack", "tril", "like"))
        if choice == "flatten":
            return dataclasses.replace(a, code=f"flatten({a.code})", shape=(math.prod(a.shape),),
                                       dims=None if a.static else (self.fresh(),))
        if choice == "reshape" and a.static:
            n = math.prod(a.shape)
            dims = (n,) if self.rng.random() < 0.5 else (1, n)
            spelled = f"{paren(a)}.reshape({', '.join(map(str, dims))})" if self.rng.random() < 0.5 else \
                f"reshape({a.code}, {dims!r})"
            return dataclasses.replace(a, code=spelled, shape=dims, dims=None)
        if choice == "expand_dims":
            axis = self.rng.randrange(-(rank + 1), rank + 1)
            shape, dims = list(a.shape), list(d)
            shape.insert(axis % (rank + 1), 1)
            dims.insert(axis % (rank + 1), 1)
            return dataclasses.replace(a, code=f"expand_dims({a.code}, {axis})", shape=tuple(shape),
                                       dims=symbolic(dims))
        if choice == "squeeze" and a.static:
            return dataclasses.replace(a, code=f"squeeze({a.code})", shape=tuple(d for d in a.shape if d != 1),
                                       dims=None)
        if choice == "T" and rank >= 2:
            return dataclasses.replace(a, code=f"{paren(a)}.T", shape=tuple(reversed(a.shape)),
                                       dims=symbolic(reversed(d)))
        if choice == "permute" and rank >= 2:
            axes = list(range(rank))
            self.rng.shuffle(axes)
            return dataclasses.replace(a, code=f"permute_dims({a.code}, {tuple(axes)!r})",
                                       shape=tuple(a.shape[i] for i in axes), dims=symbolic(d[i] for i in axes))
        if choice == "broadcast" and a.static and rank >= 1:
            shape = (2, *a.shape)
            return dataclasses.replace(a, code=f"broadcast_to({a.code}, {shape!r})", shape=shape, dims=None)
        if choice in ("concat", "stack") and rank >= 1:
            same = [v for v in self.pool if not v.py and v.shape == a.shape and v.dtype == a.dtype
                    and dims_of(v) == d]
            b = self.rng.choice(same) if same else a
            exact, err = a.exact and b.exact, max(a.err, b.err)
            if choice == "concat":
                shape = (a.shape[0] + b.shape[0], *a.shape[1:])
                dims = symbolic((shape[0] if isinstance(d[0], int) else self.fresh(), *d[1:]))
                code = f"concat(({a.code}, {b.code}), axis=0)"
            else:
                shape = (2, *a.shape)
                dims = symbolic((2, *d))
                code = f"stack(({a.code}, {b.code}))"
            return V(code, a.dtype, shape, max(a.mag, b.mag), max(a.gran, b.gran), exact, err, dims)
        if choice == "tril" and rank >= 2:
            k = self.rng.choice((-1, 0, 1))
            return dataclasses.replace(a, code=f"{self.rng.choice(('tril', 'triu'))}({a.code}, {k})")
        if choice == "like":
            name = self.rng.choice(("zeros_like", "ones_like", "full_like"))
            if name == "full_like":
                fill = self.literal("int" if not a.is_float else "float")
                if a.is_bool:
                    return None
                return V(f"full_like({a.code}, {fill.code})", a.dtype, a.shape, fill.mag, fill.gran, True, 0.0,
                         a.dims)
            return V(f"{name}({a.code})", a.dtype, a.shape, 1.0, 0, True, 0.0, a.dims)
        return None


def as_argument(v: V) -> V:
    """A value as a @jit callee's unannotated parameter sees it: numbers become weak 0-d tensors."""
    if not v.py:
        return v
    dtype = {"bool": "bool", "int": "int64", "float": "float64"}[v.dtype]
    return V(v.code, dtype, (), v.mag, v.gran, v.exact, v.err, weak=True)


def _mul_add(a: V, b: V):
    return a.mag * b.mag + a.mag, a.gran + b.gran, a.exact and b.exact, a.mag * b.err + b.mag * a.err + a.err


def _max_sub(a: V, b: V):
    return a.mag + 2 * b.mag, max(a.gran, b.gran), a.exact and b.exact, a.err + 2 * b.err


def _select(a: V, b: V):
    if not (a.exact and b.exact):
        return None  # the comparison must not flip
    return max(a.mag, b.mag), max(a.gran, b.gran), True, 0.0


# @jit functions a program may call: name -> (body, model of the result: mag, gran, exact, err)
HELPERS = {
    "mul_add": ("a * b + a", _mul_add),
    "max_sub": ("maximum(a, b) - b", _max_sub),
    "select": ("where(a > b, a, b)", _select),
}

# name -> (argument rule, |derivative| bound, ulps of error)
UNARY_FLOAT = {
    "exp": ("any", 0, 4), "log": ("at-least-1", 1, 4), "sqrt": ("at-least-1", 0.5, 2), "rsqrt": ("at-least-1", 0.5, 4),
    "tanh": ("any", 1, 4), "sigmoid": ("any", 0.25, 4), "sin": ("any", 1, 4), "cos": ("any", 1, 4),
    "erf": ("any", 1.2, 16), "gelu": ("any", 1.2, 16), "silu": ("any", 1.1, 4),
}
# torch-spelled math: name -> (domain (DOMAINS), |derivative| bound over it (None: the result's bound;
# "exact": exact where its input is), the result's bound from the argument's, ulps, spellings)
_T, _M, _F = "torch.{n}({x})", "{x}.{n}()", "torch.nn.functional.{n}({x})"


def _spellings(name: str, *forms: str) -> tuple:
    return tuple(f.replace("{n}", name) for f in forms)


def _math_table() -> dict:
    one, lin, log1 = (lambda m: 1.0), (lambda m: m + 1), (lambda m: math.log(m + 1) + 1)
    rows = {
        "exp": ("small", None, math.exp, 4, _T, _M), "expm1": ("small", None, math.exp, 4, _T, _M),
        "exp2": ("small", None, lambda m: 2 ** m, 4, _T, _M),
        "log": ("pos", 1, log1, 4, _T, _M), "log2": ("pos", 1.5, lambda m: math.log2(m + 1) + 1, 4, _T, _M),
        "log10": ("pos", 0.5, log1, 4, _T, _M), "log1p": ("nonneg", 1, log1, 4, _T, _M),
        "sqrt": ("pos", 0.5, lambda m: math.sqrt(m + 1), 2, _T, _M), "rsqrt": ("pos", 0.5, one, 4, _T, _M),
        "reciprocal": ("pos", 1, one, 2, _T, _M),
        "sin": ("any", 1, one, 4, _T, _M), "cos": ("any", 1, one, 4, _T, _M),
        "tan": ("unit", 2.5, lambda m: 1.2, 8, _T, _M), "asin": ("unit", 2.1, lambda m: 1.1, 8, _T, _M),
        "acos": ("unit", 2.1, lambda m: 2.7, 8, _T, _M), "atan": ("any", 1, lambda m: 1.6, 4, _T, _M),
        "atanh": ("unit", 4.3, lambda m: 1.4, 8, _T, _M), "sinh": ("small", None, lambda m: math.cosh(m), 8, _T, _M),
        "cosh": ("small", None, lambda m: math.cosh(m), 8, _T, _M),
        "asinh": ("any", 1, lambda m: math.asinh(m) + 1, 8, _T, _M),
        "acosh": ("pos1.5", 0.9, lambda m: math.acosh(m) + 1, 8, _T, _M),
        "tanh": ("any", 1, one, 4, _T, _M, _F), "sigmoid": ("any", 0.25, one, 4, _T, _M, _F),
        "erf": ("any", 1.2, one, 16, _T, _M), "deg2rad": ("any", 0.02, lambda m: m * 0.02, 2, _T, _M),
        "rad2deg": ("any", 57.3, lambda m: m * 57.3, 2, _T, _M),
        "elu": ("any", 1, lin, 8, _F), "celu": ("any", 1, lin, 8, _F), "selu": ("any", 1.76, lambda m: 1.06 * m + 2, 8, _F),
        "gelu": ("any", 1.2, lin, 16, _F, "torch.nn.functional.gelu({x}, approximate='tanh')"),
        "silu": ("any", 1.1, lin, 8, _F), "mish": ("any", 1.1, lin, 16, _F), "softplus": ("any", 1, lin, 8, _F),
        "logsigmoid": ("any", 1, lin, 8, _F), "softsign": ("any", 1, one, 4, _F),
        "hardsigmoid": ("any", 0.17, one, 4, _F), "hardswish": ("any", 1.5, lin, 8, _F),
        "tanhshrink": ("any", 1, lin, 8, _F), "hardtanh": ("any", "exact", lambda m: min(m, 1.0), 0, _F),
        "nan_to_num": ("any", "exact", lambda m: max(m, 1.0), 0,
                       "torch.nan_to_num({x}, nan=0.0, posinf=1.0, neginf=-1.0)"),
    }
    return {name: (*row[:4], _spellings(name, *row[4:])) for name, row in rows.items()}


TORCH_MATH = _math_table()
# the argument each domain gives: where the function and its derivative are bounded
DOMAINS = {"any": "{x}", "small": "{x}", "pos": "abs({x}) + 1", "pos1.5": "abs({x}) + 1.5", "nonneg": "abs({x})",
           "unit": "torch.clamp({x}, -0.875, 0.875)"}
DOMAIN_LIMIT = {"small": 5}   # exp-like: the argument's bound (exp(5) fits every float dtype)
# torch.X of an integer tensor computes in float32 (torch's rule); the rest take a float tensor
INT_TO_FLOAT = {"exp", "expm1", "exp2", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                "atan", "sinh", "cosh", "asinh", "acosh", "tanh", "sigmoid", "erf"}
BT_OPS = {"abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "floor", "ceil", "round",
          "sign", "negative", "square", "maximum", "minimum", "where", "clip", "sum", "mean", "max", "min", "prod",
          "argmax", "argmin", "relu", "gelu", "silu", "softmax", "log_softmax", "astype"}
OPS = [("call_helper", 1), ("arith", 10), ("divide", 3), ("floor_div_mod", 3), ("power", 2), ("negate", 1), ("compare", 4),
       ("logical", 2), ("bitwise", 2), ("ifexp", 3), ("compile_time_branch", 1), ("unary_float", 6),
       ("unary_exact", 3), ("binary_op", 2), ("reduction", 6), ("softmax", 2), ("astype", 3), ("matmul", 2),
       ("shape_op", 4), ("library_misc", 3), ("torch_math", 6), ("binary_math", 2)]


@dataclass
class Program:
    """A generated program: its source module text, argument specs and tolerances per result."""
    seed: int
    source: str
    params: list
    tolerances: list = field(default_factory=list)

    def module_text(self) -> str:
        args = [p.spec for p in self.params]
        return (f"# babytriton fuzz program, seed {self.seed}\n{HEADER}{self.source}\n\n"
                f"ARGS = {args!r}\nSEED = {self.seed}\nTOLERANCES = {self.tolerances!r}\n")


LONG_SHARE = 0.05  # programs that reduce 4096 to 100000 half-precision elements
# programs over wide shapes (a GPU kernel's vectors, warps and blocks; ragged tails): their sizes
WIDE_SHARE = 0.25
WIDE_INNER = (32, 64, 96, 100, 128, 250, 256, 257, 512, 1000, 1024, 2052, 4104)
WIDE_OUTER = (1, 2, 3, 4, 8, 16, 33, 64)
WIDE_ELEMENTS = 1 << 17
MATMUL_WORK = 1 << 22  # multiply-adds of a generated matrix product (torch's and the compiled one's run)


def generate(seed: int) -> Program:
    """One random program, the same for the same seed."""
    if random.Random(seed * 7919 + 1).random() < LONG_SHARE:
        return generate_long(seed)
    return _generate(seed)


def method_keywords(name: str, axis, options: dict) -> dict:
    """A reduction method's keywords spelled one way (a tensor method follows torch where spelled as
    torch): torch's (dim=, keepdim=) where torch's meaning is the library's, else Relax's (axis=,
    keepdims=), as x.max(dim=1) is torch's (values, indices) and torch's prod takes one int dim."""
    torch_means_it = name in ("sum", "mean", "argmax", "argmin") or name == "prod" and isinstance(axis, int)
    torch_spelt = torch_means_it and ("dim" in options or "keepdim" in options)
    names = {"axis": "dim", "keepdims": "keepdim"} if torch_spelt else {"dim": "axis", "keepdim": "keepdims"}
    return {names.get(k, k): v for k, v in options.items()}


# name -> code over `v`, tolerance (atol, rtol) in units of the result dtype's epsilon
LONG_REDUCTIONS = {
    "sum": ("v.sum(axis=-1)", (0, 1)), "sum-all": ("sum(v)", (0, 1)), "mean": ("mean(v, axis=-1)", (2, 2)),
    "max": ("v.max(axis=-1)", (0, 0)), "min": ("min(v, axis=-1)", (0, 0)), "argmax": ("argmax(v, axis=-1)", (0, 0)),
    "softmax": ("softmax(v, axis=-1)", (1e-3, 4)), "log_softmax": ("log_softmax(v, axis=-1)", (2, 4)),
    "std": ("std(v, axis=-1)", (4, 4)), "variance": ("variance(v, axis=-1)", (4, 4)),
    "layer_norm": ("layer_norm(v, ones((v.shape[-1],), v.dtype), zeros((v.shape[-1],), v.dtype), -1)", (8, 8)),
}


def generate_long(seed: int) -> Program:
    """A reduction over 4096 to 100000 elements of one (mostly half-precision) tensor, after an exact
    element-wise step: the sum of the (exact) float32 accumulation rounded once, as torch computes it."""
    rng = random.Random(seed)
    dtype = rng.choice(("float16", "bfloat16", "float16", "bfloat16", "float32"))
    n = rng.randint(10_000, 100_000) if rng.random() < 0.7 else rng.choice((4096, 4097, 8192, 30_000))
    name = rng.choice(list(LONG_REDUCTIONS))
    if name.startswith("sum") and dtype == "float16":
        n = min(n, 30_000)  # the sum of [0, 2] values stays below float16's largest (65504)
    shape = (n,) if rng.random() < 0.6 else (rng.randint(2, 3), n)
    if name == "sum-all":
        shape = (n,)
    style = rng.random()
    if style < 0.3:
        annotation = ""
    elif style < 0.6:
        annotation = f": bt.Tensor({shape!r}, {dtype!r})"
    else:
        annotation = f": bt.Tensor({tuple('m' if i < len(shape) - 1 else 'n' for i in range(len(shape)))!r}, {dtype!r})"
    extra = {"positive": True} if rng.random() < 0.7 else {}
    if rng.random() < 0.25:
        extra["view"] = rng.choice(("step", "neg") + (("T",) if len(shape) == 2 else ()))
    step = rng.choice(("x", "x", "x * 0.5", "abs(x)", "relu(x)", "x.astype('float32')"))
    result_dtype = "float32" if "float32" in step else dtype
    code, (atol, rtol) = LONG_REDUCTIONS[name]
    eps = EPS[result_dtype] if name not in ("max", "min", "argmax") else 0.0
    # inexact ones: float32 partial sums rounded in another order. Vector partials keep the error
    # near sqrt(n) roundings; a row whose length has no power-of-two factor >= 4 (or is symbolic)
    # in a several-block CPU kernel (softmax, layer_norm) is summed serially, and that error grows
    # like n: 2e-4 relative at 97,609 elements, torch's pairwise sum 1.4e-5 (a known limit; layer_norm,
    # two such sums, 1.8e-5 at 4,097)
    spread = max(4 * math.sqrt(n), n / 8) * EPS["float32"] if rtol > 1 else 0.0
    source = (f"@bt.jit(cache=False)\ndef f(x{annotation}):\n    v = {step}\n    r = {code}\n    return r\n")
    spec = ("tensor", shape, dtype, extra) if extra else ("tensor", shape, dtype)
    return Program(seed, source, [Param("x", "tensor", annotation, spec)], [(atol * eps, rtol * eps + spread)])


def _generate(seed: int) -> Program:
    """One random program, the same for the same seed."""
    gen = Generator(seed)
    gen.make_params()
    lines = []
    for i in range(gen.rng.randint(1, 5)):
        lines += gen.statement(f"v{i}")
    locals_ = [v for v in gen.pool if v.code.startswith("v")]
    results = locals_[-1:] if locals_ else [gen.pool[0]]
    extra = [v for v in gen.pool if v not in results]
    results += gen.rng.sample(extra, min(len(extra), gen.rng.choice((0, 0, 1, 2))))
    lines.append(f"    return {', '.join(v.code for v in results)}")
    signature = ", ".join(p.name + (f": {p.annotation}" if p.annotation else "") for p in gen.params)
    helpers = "".join(f"@bt.jit(cache=False)\ndef {name}(a, b):\n    return {HELPERS[name][0]}\n\n\n"
                      for name in sorted(gen.helpers))
    source = helpers + f"@bt.jit(cache=False)\ndef f({signature}):\n" + "\n".join(lines) + "\n"
    tolerances = [(0.0, 0.0) if v.exact else (4 * v.err + 1e-12, 0.0) for v in results]
    return Program(seed, source, gen.params, tolerances)


# ----------------------------------------------------------------------------------------------
# running a program: compiled against eager
# ----------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """kind: "ok"; "invalid" (a generator or translation bug, not babytriton's); or a finding (see
    FINDINGS)."""
    kind: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FINDINGS


# what babytriton can get wrong, each compared with plain torch on the same inputs
FINDINGS = {
    "torch-mismatch": "the compiled result differs from torch's (value, dtype or shape)",
    "should-raise": "torch raises on the program (e.g. max of an empty tensor); the compiled call returned a value",
    "unclean-error": "torch raises; the compiled call raised, but not a clean Python error (TVM internals)",
    "compile-error": "torch runs the program; babytriton refuses it",
    "crash": "torch runs the program; the compiled call raised",
    "mismatch": "the compiled result differs from the eager reference's (torch agrees with the compiled one)",
    "eager-error": "the eager reference raised where torch and the compiled call ran",
    "thread-crash": "a call from one of several threads at once raised",
    "thread-mismatch": "a call from one of several threads at once returned another result",
    "thread-hang": "calls from several threads at once did not finish",
    "fatal": "the process died (a signal such as SIGSEGV) while checking the program",
    "cuda-build": "the program builds and runs on the CPU; building it for CUDA (sm_90) failed",
    "cuda-nvcc": "the program builds for CUDA (sm_90), but nvcc rejects the generated CUDA source",
}
# the GPU every program is also built for with `cuda`: nothing runs, so no GPU is needed
SM90 = {"kind": "cuda", "arch": "sm_90"}

_counter = itertools.count()


def load(path: str | Path):
    """Import a program file as a fresh module."""
    name = f"_bt_fuzz_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_file(path: str | Path, threads: int = 0, cuda: bool = False) -> Outcome:
    """Run a program file with torch, compiled and eagerly, and compare; with `threads`, also from
    that many threads at once (a file's THREADS asks for it too); with `cuda` (or the file's CUDA),
    also build it for CUDA."""
    try:
        module = load(path)
    except CompilationError as e:
        return Outcome("compile-error", f"at decoration: {e.message}")
    return check_module(module, Path(path).read_text(), threads or getattr(module, "THREADS", 0),
                        cuda or getattr(module, "CUDA", False))


def check_module(module, text: str | None = None, threads: int = 0, cuda: bool = False) -> Outcome:
    """torch is the oracle: the program translated into plain torch (testing/oracle.py) runs on the
    same inputs; the compiled call must give its dtypes, shapes and values (NaN equal to NaN), or,
    where torch raises, raise a clean Python error. The eager reference is a second opinion. With
    `cuda`, a program that passes is also built for sm_90 and its CUDA compiled by nvcc (check_cuda)."""
    def fresh():  # new tensors for each call (a copy would lose a view's strides or negative bit)
        return make_args(module.ARGS, module.SEED)

    if hasattr(module, "EXPECT_ERROR"):  # a program both ways must refuse
        return _check_refused(module, fresh(), module.EXPECT_ERROR)
    tolerances = module.TOLERANCES
    try:
        translated = oracle.translate(text if text is not None else Path(module.__file__).read_text())
    except Exception as e:  # noqa: BLE001
        return Outcome("invalid", f"torch translation: {type(e).__name__}: {e}")
    try:
        with _one_torch_thread():
            expected, torch_error = translated.f(*fresh()), None
    except Exception as e:  # noqa: BLE001 - torch refuses the program: babytriton must refuse it cleanly
        expected, torch_error = None, e
    if torch_error is not None:
        return _check_raises(module, fresh, torch_error)
    for attempt in range(2):  # the first call compiles; the second takes the cached fast path
        try:
            got = module.f(*fresh())
        except CompilationError as e:
            return Outcome("compile-error", e.message)
        except Exception as e:  # noqa: BLE001 - anything else is a compiler crash
            return Outcome("crash", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}")
        problem = compare(got, expected, tolerances, ("compiled", "torch"))
        if problem:
            return Outcome("torch-mismatch", problem if attempt == 0 else f"(cached call) {problem}")
    try:
        eager = module.f.eager(*fresh())
    except Exception as e:  # noqa: BLE001
        return Outcome("eager-error", f"eager: {type(e).__name__}: {e}")
    problem = compare(got, eager, tolerances)
    if problem:
        return Outcome("mismatch", problem)
    if threads:
        outcome = check_threads(module.f, fresh, expected, tolerances, threads)
        if outcome.kind != "ok":
            return outcome
    return check_cuda(module.f, fresh()) if cuda else Outcome("ok")


def check_cuda(fn, args) -> Outcome:
    """`fn` (a @jit function that ran on the CPU) built for SM90 for the same arguments, and its CUDA
    source compiled to a cubin by nvcc, as the GPU's driver would compile it (where nvcc is
    installed). A refusal or crash of the build is "cuda-build"; nvcc's error, "cuda-nvcc"."""
    from ..jit import jit
    try:
        kernel = jit(fn.fn, **{**fn.options, "cache": False, "target": SM90}).compile(*args)
    except CompilationError as e:
        return Outcome("cuda-build", e.message)
    except Exception as e:  # noqa: BLE001 - a compiler crash
        return Outcome("cuda-build", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}")
    source = kernel.source
    if not source.strip() or shutil.which("nvcc") is None:
        return Outcome("ok")
    import tvm
    from tvm.support import nvcc
    try:
        with tvm.target.Target(SM90):
            nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")
    except Exception as e:  # noqa: BLE001 - nvcc's compile log
        errors = [line for line in str(e).splitlines() if "error" in line]
        return Outcome("cuda-nvcc", "\n".join(errors[:6]) or str(e)[-2000:])
    return Outcome("ok")


@contextlib.contextmanager
def _one_torch_thread():
    """torch's reference runs on one thread: its multi-threaded half-precision sums round each
    thread's partial sum (71,320 bfloat16 values summing to 13.5 give 14.0 on 4 threads), so only
    the one-thread result is the exactly rounded float32 accumulation the oracle promises."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _clean(error: BaseException) -> bool:
    """A clean Python error: no TVM exception in its chain, no TVM internals in its message."""
    seen = error
    while seen is not None:
        if type(seen).__module__.split(".")[0] == "tvm" or "TVM" in type(seen).__name__:
            return False
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    text = str(error)
    return isinstance(error, Exception) and not any(w in text for w in ("tvm.", "TVM", "Traceback", "src/"))


def _check_raises(module, fresh, torch_error: Exception) -> Outcome:
    """torch refuses the program: the compiled call must raise a clean Python error."""
    reason = f"torch raised {type(torch_error).__name__}: {str(torch_error).splitlines()[0] if str(torch_error) else ''}"
    try:
        got = module.f(*fresh())
    except Exception as e:  # noqa: BLE001
        if _clean(e):
            return Outcome("ok")
        return Outcome("unclean-error", f"{reason}; compiled raised {type(e).__name__}: {str(e)[:500]}")
    return Outcome("should-raise", f"{reason}; compiled returned {_short(got)}")


def check_threads(fn, fresh, expected, tolerances, threads: int, calls: int = 25, timeout: float = 120.0) -> Outcome:
    """`fn` called `calls` times from each of `threads` threads at once, each result compared with
    torch's."""
    import threading
    problems = []
    barrier = threading.Barrier(threads)
    inputs = [fresh() for _ in range(threads)]

    def work(index):
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        for call in range(calls):
            try:
                got = fn(*inputs[index])
            except Exception as e:  # noqa: BLE001
                problems.append(("thread-crash", f"thread {index}, call {call}: {type(e).__name__}: {e}"))
                return
            problem = compare(got, expected, tolerances, ("compiled", "torch"))
            if problem:
                problems.append(("thread-mismatch", f"thread {index}, call {call}: {problem}"))
                return

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout)
    if any(w.is_alive() for w in workers):
        return Outcome("thread-hang", f"{threads} threads x {calls} calls: not done after {timeout:.0f}s")
    if problems:
        kind, detail = problems[0]
        return Outcome(kind, f"{threads} threads x {calls} calls, {len(problems)} went wrong; first: {detail}")
    return Outcome("ok")


def _check_refused(module, args, expected: str) -> Outcome:
    """A program the compiler must refuse with `expected` in its message; the eager run too, unless
    the file says EAGER_RUNS (the refusal is about compiled sizes, not Python's meaning)."""
    try:
        module.f(*args)
    except CompilationError as e:
        if expected not in e.message:
            return Outcome("mismatch", f"compiled: refused with another message: {e.message}")
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", f"{type(e).__name__}: {e}")
    else:
        return Outcome("mismatch", "compiled: ran, but should refuse the program")
    if getattr(module, "EAGER_RUNS", False):
        return Outcome("ok")
    try:
        module.f.eager(*args)
    except Exception as e:  # noqa: BLE001
        if expected not in str(e):
            return Outcome("mismatch", f"eager: refused with another message: {e}")
        return Outcome("ok")
    return Outcome("mismatch", "eager: ran, but should refuse the program")


def compare(got, expected, tolerances, names=("compiled", "eager")) -> str | None:
    """What differs between a compiled result and the expected one (None: nothing): dtypes, shapes,
    then values within (atol, rtol), NaN equal to NaN. An expected Python number (torch's result of
    arithmetic on numbers) is compared by value only."""
    ours, theirs = names
    if isinstance(expected, tuple) or isinstance(got, tuple):
        if not (isinstance(got, tuple) and isinstance(expected, tuple)) or len(got) != len(expected):
            return f"results differ in structure: {ours} {_short(got)}, {theirs} {_short(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare(g, e, [tolerances[i]] if tolerances and i < len(tolerances) else None, names)
            if problem:
                return f"result {i}: {problem}"
        return None
    if got is None or expected is None:
        return None if got is expected else f"{ours} {_short(got)}, {theirs} {_short(expected)}"
    if isinstance(expected, (bool, int, float)) and isinstance(got, torch.Tensor) and got.dim() == 0:
        expected = torch.tensor(expected, dtype=got.dtype)
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return f"{ours} {_short(got)}, {theirs} {_short(expected)}"
    if got.dtype != expected.dtype:
        return f"dtype: {ours} {got.dtype}, {theirs} {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape: {ours} {tuple(got.shape)}, {theirs} {tuple(expected.shape)}"
    name = NAMES[got.dtype]
    if tolerances:
        atol, rtol = tolerances[0]
        if atol or rtol:  # inexact: at least a few roundings of the dtype torch computed in (the
            rtol = max(rtol, 4 * EPS.get(name, 0.0))  # generator's dtype model can be finer)
    else:
        atol, rtol = DEFAULT_TOLERANCE.get(name, (0.0, 0.0))
    g, e = got.resolve_neg().double(), expected.resolve_neg().double()
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True) if atol or rtol else \
        (g == e) | (g.isnan() & e.isnan())
    if bool(close.all()):
        return None
    bad = (~close).nonzero()[0].tolist()
    return (f"values differ at {tuple(bad)}: {ours} {g[tuple(bad)].item()!r}, {theirs} {e[tuple(bad)].item()!r} "
            f"(atol {atol:g}, rtol {rtol:g}; {int((~close).sum())} of {close.numel()} differ)")


def _short(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<{value.dtype} {tuple(value.shape)}>"
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ")"
    return repr(value)


# ----------------------------------------------------------------------------------------------
# minimising a failing program
# ----------------------------------------------------------------------------------------------
def minimise(text: str, outcome: Outcome, workdir: Path, budget: int = 150, threads: int = 0,
             cuda: bool = False) -> tuple[str, Outcome]:
    """The smallest variant of a program file's text found that fails the same way: statements
    dropped, expressions replaced by their parts, unused parameters removed. Candidates are checked
    with the default tolerances (the generator's error bounds don't survive the edits)."""
    text = _with_default_tolerances(text)
    same = _same_failure(outcome)
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for candidate in _candidates(text):
            tries += 1
            result = _run_text(candidate, workdir, threads, cuda)
            if same(result):
                text, outcome, improved = candidate, result, True
                break
            if tries >= budget:
                break
    return text, outcome


def _same_failure(outcome: Outcome):
    kind = outcome.kind
    # a crash: the same exception type; a refusal: the same message up to its first colon; a wrong
    # result: wrong the same way (dtype, shape or values)
    category = _category(outcome)

    def same(result: Outcome) -> bool:
        return result.kind == kind and _category(result) == category
    return same


def _category(outcome: Outcome) -> str:
    first = outcome.detail.splitlines()[0] if outcome.detail else ""
    if outcome.kind in ("crash", "compile-error"):
        return first.split(":")[0]
    if outcome.kind in ("torch-mismatch", "mismatch", "thread-mismatch"):
        first = re.sub(r"^(\(cached call\) )?(\d+ threads.*first: )?(thread \d+, call \d+: )?(result \d+: )*", "", first)
        category = first.split(":")[0].split(" at ")[0]
        values = re.search(r": \w+ (\S+), \w+ (\S+) \(", first)
        if category == "values differ" and values:  # which way: NaN or inf lost, or the sign
            ours, theirs = (float(v) for v in values.groups())
            category += (" (nan)" if math.isnan(ours) != math.isnan(theirs) else
                         " (inf)" if math.isinf(ours) != math.isinf(theirs) else
                         " (sign)" if ours == -theirs != 0 else "")
        return category
    return ""


def _with_default_tolerances(text: str) -> str:
    lines = [line if not line.startswith("TOLERANCES =") else "TOLERANCES = None" for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def _run_text(text: str, workdir: Path, threads: int = 0, cuda: bool = False) -> Outcome:
    path = workdir / f"candidate_{next(_counter)}.py"
    path.write_text(text)
    try:
        return check_file(path, threads, cuda)
    except Exception as e:  # noqa: BLE001 - a broken candidate (e.g. a NameError at import)
        return Outcome("invalid", f"{type(e).__name__}: {e}")
    finally:
        path.unlink(missing_ok=True)


def _candidates(text: str):
    """Smaller variants of a program file's text, largest cuts first."""
    module = ast.parse(text)
    fn_index = next(i for i, n in enumerate(module.body) if isinstance(n, ast.FunctionDef) and n.name == "f")
    fn = module.body[fn_index]
    body = fn.body
    # drop one statement (never the return)
    for i in range(len(body) - 1):
        yield _edited(module, fn_index, lambda f, i=i: f.body.pop(i))
    # `a = b` with b a name: drop it and read b where a was read
    for i, stmt in enumerate(body[:-1]):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Name):
            yield _edited(module, fn_index, lambda f, i=i: _inline_alias(f, i))
    # return fewer values
    ret = body[-1]
    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
        for i in range(len(ret.value.elts)):
            yield _edited(module, fn_index, lambda f, i=i: setattr(f.body[-1], "value", f.body[-1].value.elts[i]))
    # drop unused helper functions
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    for i, node in enumerate(module.body):
        if isinstance(node, ast.FunctionDef) and node.name != "f" and node.name not in used:
            yield _render(ast.Module([n for j, n in enumerate(module.body) if j != i], []))
    # plain inputs: no view, no special values
    args = next((n for n in module.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "ARGS"),
                None)
    for i, spec in enumerate(args.value.elts if args is not None else []):
        if isinstance(spec, ast.Tuple) and len(spec.elts) == 4:
            yield _without_extras(module, i)
    # drop unused parameters
    for i, arg in enumerate(fn.args.args):
        if arg.arg not in used:
            yield _without_param(module, fn_index, i)
    # replace an expression by one of its parts
    expressions = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.expr)
                   and not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))]
    for index, node in enumerate(expressions):
        for part in _parts(node):
            yield _edited(module, fn_index, lambda f, index=index, part=part: _replace(f, index, part))


def _inline_alias(fn: ast.FunctionDef, i: int):
    alias = fn.body.pop(i)
    old, new = alias.targets[0].id, alias.value.id
    for stmt in fn.body[i:]:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == old and isinstance(node.ctx, ast.Load):
                node.id = new


def _parts(node: ast.expr) -> list:
    if isinstance(node, ast.Call):
        return [a for a in node.args if not isinstance(a, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators] if len(node.ops) > 1 else []
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.Attribute):
        return [node.value] if not isinstance(node.value, ast.Name) else []
    if isinstance(node, ast.Tuple):
        return list(node.elts) if len(node.elts) > 1 else []
    return []


def _replace(fn: ast.FunctionDef, index: int, part_copy_of: ast.expr):
    expressions = [n for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.expr)
                   and not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))]
    target = expressions[index]
    replacement = ast.parse(ast.unparse(part_copy_of), mode="eval").body
    for parent in ast.walk(fn):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, replacement)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = replacement
                        return


def _edited(module: ast.Module, fn_index: int, edit) -> str:
    copy = ast.parse(ast.unparse(module))
    edit(copy.body[fn_index])
    return _render(copy)


def _without_param(module: ast.Module, fn_index: int, i: int) -> str:
    copy = ast.parse(ast.unparse(module))
    fn = copy.body[fn_index]
    fn.args.args.pop(i)
    for node in copy.body:  # ARGS: the same position
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ARGS":
            node.value.elts.pop(i)
    return _render(copy)


def _without_extras(module: ast.Module, i: int) -> str:
    copy = ast.parse(ast.unparse(module))
    for node in copy.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ARGS":
            node.value.elts[i].elts.pop()
    return _render(copy)


def _render(module: ast.Module) -> str:
    return "# babytriton fuzz program (minimised)\n" + ast.unparse(module) + "\n"


# ----------------------------------------------------------------------------------------------
# the driver
# ----------------------------------------------------------------------------------------------
def reproducer(text: str, outcome: Outcome, threads: int = 0, cuda: bool = False) -> str:
    """A program file that shows a finding, ready for tests/testing/fuzz_regressions/ once it is fixed."""
    header = "".join(f"# {line}\n" for line in outcome.detail.splitlines()[:6])
    thread_kind = outcome.kind.startswith("thread") or outcome.kind == "fatal" and threads
    cuda_kind = outcome.kind.startswith("cuda") or outcome.kind == "fatal" and cuda
    return f"# {outcome.kind}: {FINDINGS.get(outcome.kind, '')}\n{header}{text}" + (
        f"THREADS = {threads}\n" if thread_kind and "THREADS =" not in text else "") + (
        "CUDA = True\n" if cuda_kind and "CUDA =" not in text else "")


@dataclass
class Report:
    programs: int = 0
    failures: list = field(default_factory=list)   # (seed, Outcome, reproducer path or None)
    invalid: list = field(default_factory=list)    # (seed, Outcome): generator bugs
    seconds: float = 0.0
    seed: int = 0
    threads: int = 0
    cuda: bool = False

    def summary(self) -> str:
        """N, seed, time, and the failures grouped by kind."""
        lines = [f"{self.programs} programs, seed {self.seed}, threads {self.threads or 'off'}, "
                 f"CUDA build {'on' if self.cuda else 'off'}, "
                 f"{self.seconds:.1f}s ({self.seconds / max(self.programs, 1):.2f}s each): "
                 f"{len(self.failures)} failures, {len(self.invalid)} invalid programs (generator bugs)"]
        kinds: dict = {}
        for seed, outcome, path in self.failures:
            kinds.setdefault(outcome.kind, []).append((seed, outcome, path))
        for kind, found in sorted(kinds.items(), key=lambda item: -len(item[1])):
            lines.append(f"  {kind} ({len(found)}): {FINDINGS.get(kind, '')}")
            for seed, outcome, path in found:
                first = outcome.detail.splitlines()[0] if outcome.detail else ""
                lines.append(f"    seed {seed}: {first[:160]}" + (f" -> {path}" if path else ""))
        for seed, outcome in self.invalid:
            lines.append(f"  invalid: seed {seed}: {outcome.detail.splitlines()[0][:160] if outcome.detail else ''}")
        return "\n".join(lines)


MINIMISE_PER_SORT = 3  # failures of one kind and category minimised per run; the rest saved as generated


def program_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def run(n: int, seed: int = 0, out: str | Path | None = None, minimise_failures: int = MINIMISE_PER_SORT,
        log=None, threads: int = 0, first: int = 0, progress=None, cuda: bool = False) -> Report:
    """Generate n programs, run each with torch, compiled (and, with `threads`, from that many threads
    at once) and eagerly, and compare (with `cuda`, also build each for CUDA: check_cuda); save each
    failure, minimised, under `out`. `first`: the index
    of the first program; `progress(index, outcome, path)` hears of each one before (outcome None)
    and after. `minimise_failures`: how many failures of each sort (kind and category) to minimise
    (True: MINIMISE_PER_SORT; False: none)."""
    if minimise_failures is True:
        minimise_failures = MINIMISE_PER_SORT
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    seen: dict = {}
    with tempfile.TemporaryDirectory(prefix="bt_fuzz_") as tmp:
        workdir = Path(tmp)
        for index in range(first, n):
            s = program_seed(seed, index)
            if progress:
                progress(index, None, None)
            program = generate(s)
            text = program.module_text()
            path = workdir / f"program_{s}.py"
            path.write_text(text)
            if out_dir is not None:  # a hard crash (the process dies) leaves this behind as the reproducer
                (out_dir / "_current.py").write_text(text)
            outcome = check_file(path, threads, cuda)
            path.unlink()
            report.programs += 1
            saved = None
            if outcome.kind == "invalid":
                report.invalid.append((s, outcome))
                if log:
                    log(f"[{index}] seed {s}: generator wrote an invalid program: {outcome.detail.splitlines()[0]}")
            elif outcome.failed:
                # minimising takes up to a few dozen runs: only the first few failures of each sort
                sort = (outcome.kind, _category(outcome))
                seen[sort] = seen.get(sort, 0) + 1
                small, small_outcome = (minimise(text, outcome, workdir, threads=threads, cuda=cuda)
                                        if minimise_failures and seen[sort] <= int(minimise_failures)
                                        else (text, outcome))
                if out_dir is not None:
                    saved = out_dir / f"fuzz_{s}_{outcome.kind}.py"
                    saved.write_text(reproducer(small, small_outcome, threads, cuda))
                report.failures.append((s, small_outcome, saved))
                outcome = small_outcome
                if log:
                    log(f"[{index}] seed {s}: {outcome.kind}: "
                        f"{outcome.detail.splitlines()[0] if outcome.detail else ''}" + (f" -> {saved}" if saved else ""))
            if progress:
                progress(index, outcome, saved)
    if out_dir is not None:
        (out_dir / "_current.py").unlink(missing_ok=True)
    report.seconds = time.perf_counter() - start
    return report


def run_isolated(n: int, seed: int = 0, out: str | Path | None = None, minimise_failures: int = MINIMISE_PER_SORT,
                 log=None, threads: int = 0, cuda: bool = False, first: int = 0) -> Report:
    """run() in a child process: a program that kills it (SIGSEGV, abort) is a "fatal" finding, its
    program saved as the reproducer, and a new child goes on with the next program."""
    import json
    import signal
    import subprocess
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    while first < n:
        command = [sys.executable, "-m", "babytriton.testing.fuzz", "--worker", str(n), str(seed), str(first),
                   str(threads), str(int(minimise_failures)), str(out_dir) if out_dir is not None else "",
                   str(int(cuda))]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        current = None
        for line in child.stdout:
            if not line.startswith(_WORKER_MARK):
                continue
            message = json.loads(line[len(_WORKER_MARK):])
            if message["kind"] is None:
                current = message["index"]
                continue
            current = None
            outcome = Outcome(message["kind"], message["detail"])
            report.programs += 1
            s = program_seed(seed, message["index"])
            if outcome.kind == "invalid":
                report.invalid.append((s, outcome))
            elif outcome.failed:
                report.failures.append((s, outcome, Path(message["path"]) if message["path"] else None))
                if log:
                    log(f"[{message['index']}] seed {s}: {outcome.kind}: {outcome.detail.splitlines()[0][:200]}")
        code = child.wait()
        if current is None:
            if code != 0:
                raise RuntimeError(f"the fuzzing worker failed (exit {code}) outside any program")
            break
        s = program_seed(seed, current)
        name = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else f"exit {code}"
        outcome = Outcome("fatal", f"the process died ({name}) checking this program"
                          + (f" with {threads} threads" if threads else ""))
        saved = None
        if out_dir is not None:
            saved = out_dir / f"fuzz_{s}_fatal.py"
            saved.write_text(reproducer(generate(s).module_text(), outcome, threads, cuda))
            (out_dir / "_current.py").unlink(missing_ok=True)
        report.programs += 1
        report.failures.append((s, outcome, saved))
        if log:
            log(f"[{current}] seed {s}: fatal: {outcome.detail}")
        first = current + 1
    report.seconds = time.perf_counter() - start
    return report


PARALLEL_CHUNK = 25  # programs a worker process takes at a time in run_parallel


def run_parallel(n: int, seed: int = 0, out: str | Path | None = None, jobs: int = 2,
                 minimise_failures: int = MINIMISE_PER_SORT, log=None, threads: int = 0,
                 cuda: bool = False) -> Report:
    """run_isolated() over `jobs` worker processes at once: programs 0..n-1 of `seed` (the same ones a
    single run checks) in chunks of PARALLEL_CHUNK, each job saving under its own `out`/jobJ."""
    import threading
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    chunks = iter(range(0, n, PARALLEL_CHUNK))
    lock = threading.Lock()

    def work(job: int):
        folder = Path(out) / f"job{job}" if out is not None else None
        while True:
            with lock:
                first = next(chunks, None)
            if first is None:
                return
            try:
                part = run_isolated(min(first + PARALLEL_CHUNK, n), seed, folder, minimise_failures, log, threads,
                                    cuda, first)
            except RuntimeError as e:  # a worker that failed outside any program: the chunk is lost, said so
                if log:
                    log(f"programs {first}..{first + PARALLEL_CHUNK - 1}: {e}")
                continue
            with lock:
                report.programs += part.programs
                report.failures += part.failures
                report.invalid += part.invalid
    workers = [threading.Thread(target=work, args=(j,)) for j in range(max(jobs, 1))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    report.seconds = time.perf_counter() - start
    return report


_WORKER_MARK = "@@fuzz "


def _worker(argv) -> None:
    import json
    n, seed, first, threads, minimise_failures, out, cuda = argv

    kill_at = os.environ.get("BT_FUZZ_KILL_AT")  # tests of run_isolated: die as a segfault would

    def progress(index, outcome, path):
        message = {"index": index, "kind": outcome and outcome.kind, "detail": outcome and outcome.detail,
                   "path": str(path) if path else None}
        print(_WORKER_MARK + json.dumps(message), flush=True)
        if outcome is None and kill_at is not None and index == int(kill_at):
            import signal
            os.kill(os.getpid(), signal.SIGSEGV)
    run(int(n), int(seed), out or None, int(minimise_failures), threads=int(threads), first=int(first),
        progress=progress, cuda=bool(int(cuda)))


if __name__ == "__main__":  # python -m babytriton.testing.fuzz N SEED; scripts/fuzz.py has the options
    if sys.argv[1:2] == ["--worker"]:
        _worker(sys.argv[2:])
    else:
        result = run(int(sys.argv[1]) if len(sys.argv) > 1 else 50, int(sys.argv[2]) if len(sys.argv) > 2 else 0,
                     os.environ.get("BT_FUZZ_OUT"), log=print)
        print(result.summary())
