"""Expressions calling library math, element by element: babytriton's names and torch's spellings."""
from __future__ import annotations

import dataclasses
import math

from .values import INTS, V, broadcast, broadcast_dims, converted_err, finish, paren, promote
from .tables import BT_OPS, DOMAINS, DOMAIN_LIMIT, INT_TO_FLOAT, TORCH_MATH, UNARY_FLOAT


class MathCalls:
    """The element-wise library calls a Generator writes (a mixin)."""

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
