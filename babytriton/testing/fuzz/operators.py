"""Expressions built from Python's operators: arithmetic, division, powers, comparisons, logic,
bitwise operators, conditional expressions and calls of @jit helpers."""
from __future__ import annotations

import dataclasses
import math

from .values import FLOATS, Unfit, V, broadcast, broadcast_dims, converted_err, finish, paren, promote
from .tables import HELPERS, as_argument


class Operators:
    """The Python-operator expressions a Generator writes (a mixin)."""

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
