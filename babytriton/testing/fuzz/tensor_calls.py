"""Expressions calling library ops over whole tensors: reductions, softmax, casts, matmul and shape ops."""
from __future__ import annotations

import dataclasses
import math

from .values import (FLOATS, INPUT_DTYPES, INTS, LIMIT, V, broadcast, broadcast_dims, converted_err, dims_of, finish,
                     fits, paren, representable, symbolic)
from .tables import MATMUL_WORK, method_keywords


class TensorCalls:
    """The reductions, casts, products and shape ops a Generator writes (a mixin)."""

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
        if dtype in INTS and a.is_float and self.special:  # NaN and inf as integers: undefined (book/docs/guide/semantics.md)
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
            return self.joined(a, choice)
        if choice == "tril" and rank >= 2:
            k = self.rng.choice((-1, 0, 1))
            return dataclasses.replace(a, code=f"{self.rng.choice(('tril', 'triu'))}({a.code}, {k})")
        if choice == "like":
            return self.like(a)
        return None

    def joined(self, a: V, how: str) -> V:
        """`concat` (along axis 0) or `stack` of `a` and a value like it (or `a` itself)."""
        d = dims_of(a)
        same = [v for v in self.pool if not v.py and v.shape == a.shape and v.dtype == a.dtype
                and dims_of(v) == d]
        b = self.rng.choice(same) if same else a
        exact, err = a.exact and b.exact, max(a.err, b.err)
        if how == "concat":
            shape = (a.shape[0] + b.shape[0], *a.shape[1:])
            dims = symbolic((shape[0] if isinstance(d[0], int) else self.fresh(), *d[1:]))
            code = f"concat(({a.code}, {b.code}), axis=0)"
        else:
            shape = (2, *a.shape)
            dims = symbolic((2, *d))
            code = f"stack(({a.code}, {b.code}))"
        return V(code, a.dtype, shape, max(a.mag, b.mag), max(a.gran, b.gran), exact, err, dims)

    def like(self, a: V) -> V | None:
        """`zeros_like`, `ones_like` or `full_like` of `a`."""
        name = self.rng.choice(("zeros_like", "ones_like", "full_like"))
        if name == "full_like":
            fill = self.literal("int" if not a.is_float else "float")
            if a.is_bool:
                return None
            return V(f"full_like({a.code}, {fill.code})", a.dtype, a.shape, fill.mag, fill.gran, True, 0.0,
                     a.dims)
        return V(f"{name}({a.code})", a.dtype, a.shape, 1.0, 0, True, 0.0, a.dims)
