"""The program generator: its parameters and the choice of operands and expressions; the statements
and expressions it writes come from its mixins (statements, operators, math_calls, tensor_calls)."""
from __future__ import annotations

import math
import random

from .values import FLOATS, INPUT_DTYPES, Unfit, V, symbolic
from .arguments import Param
from .tables import FLOAT_LITERALS, INT_LITERALS, OPS, WIDE_ELEMENTS, WIDE_INNER, WIDE_OUTER, WIDE_SHARE
from .statements import Statements
from .operators import Operators
from .math_calls import MathCalls
from .tensor_calls import TensorCalls


class Generator(Statements, Operators, MathCalls, TensorCalls):
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
            self.tensor_param(f"x{i}", base, special)
        for i in range(rng.choice((0, 0, 1, 1, 2))):
            self.scalar_param(f"s{i}", special)
        if rng.random() < 0.35:
            value = rng.choice((1, 2, 3, 0.5, 1.5, True))
            self.params.append(Param("k", "constexpr", "bt.constexpr", ("constexpr", value)))
            dtype = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"
            self.pool.append(V("k", dtype, None, max(abs(value), 1), 1))

    def tensor_param(self, name: str, base: list[int], special: bool) -> None:
        """A tensor over the trailing axes of `base` (some of size 1), with a static, symbolic or no
        annotation, perhaps passed as a view or holding NaN/inf/-0.0 (`special`)."""
        rng, rank = self.rng, len(base)
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
        spec = ("tensor", shape, dtype, extra) if extra else ("tensor", shape, dtype)
        self.params.append(Param(name, "tensor", annotation, spec))
        gran = 3 if dtype in FLOATS else 0
        mag = 2.0 if dtype in FLOATS else 1.0 if dtype == "bool" else 4.0
        self.pool.append(V(name, dtype, shape, mag, gran, True, 0.0, symbolic(dims)))

    def scalar_param(self, name: str, special: bool) -> None:
        """A runtime scalar: a Python number as torch sees it (weak against tensors), of any kind,
        annotated or not; a float one may be NaN, +-inf or -0.0 (`special`)."""
        rng = self.rng
        kind = rng.choice(("int", "float", "bool", "auto-int", "auto-float", "auto-bool"))
        base_kind = kind.split("-")[-1]
        value = {"int": rng.randint(-3, 3), "float": rng.randint(-8, 8) / 4, "bool": rng.random() < 0.5}[base_kind]
        if special and base_kind == "float" and rng.random() < 0.5:
            value = rng.choice(("nan", "inf", "-inf", -0.0))
        annotation = "" if kind.startswith("auto") else kind
        dtype = {"int": "int64", "float": "float64", "bool": "bool"}[base_kind]
        self.params.append(Param(name, "scalar", annotation, ("scalar", kind, value)))
        mag = max(abs(float(value)), 1) if isinstance(value, (int, float)) else 1.0
        self.pool.append(V(name, dtype, (), mag, 2 if base_kind == "float" else 0, weak=True))

    def wide_shape(self, rank: int) -> list[int]:
        """Sizes GPU schedules take apart (vectors, warps, blocks, ragged tails): a wide innermost axis,
        outer axes up to 64, at most WIDE_ELEMENTS elements in all."""
        rng = self.rng
        shape = [rng.choice(WIDE_OUTER) for _ in range(rank - 1)] + [rng.choice(WIDE_INNER)]
        while math.prod(shape) > WIDE_ELEMENTS:
            axis = max(range(rank - 1), key=lambda i: shape[i]) if rank > 1 and max(shape[:-1]) > 1 else rank - 1
            shape[axis] = max(shape[axis] // 2, 1)
        return shape

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
