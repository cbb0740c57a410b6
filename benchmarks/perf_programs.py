"""The performance fuzzer's programs (benchmarks/perf_fuzz.py runs them): PyTorch code as users write it.

`generate(seed, index)` writes one program: a plain function over its tensors, composed from 1-4 parts
(an element-wise chain, a normalisation over some axes, a softmax, reductions over any axis set, a
scan, halves of a `chunk`, a transpose or permute, a group reshape, a residual, a quantised output)
in the spellings people use (`x.float()`, `x.mean(-1, keepdim=True)`, `torch.rsqrt`, `F.gelu`,
`torch.where`, `.amax`, `.max(dim=...)`, `softmax`, `cumsum`, `x.reshape(n, g, -1)`, `chunk`, `b.T`).
It starts from a tensor of 2^16 to 2^26 elements (`log2`), of rank 1-4, widths powers of two and not
(64 experts, 1000, 4096, 50257), float32 / float16 / bfloat16 / int8 (with its scales), some passed
as transposed or permuted views, some transposed inside; it returns one to four results.

What the differential fuzzer (babytriton/testing/fuzz/) checks bit for bit at small sizes, this
times at large ones: the values only need to stay finite and well conditioned, so every step keeps
a rough bound on its magnitude (`V.mag`), exp only sees bounded or max-shifted values, and divisors
are kept away from zero. A program is its module text (babytriton reads source files) and `Arg`
specs that make its inputs, the same for the same seed.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import torch

LOG2 = (16, 26)          # the programs' sizes: total input elements 2^16 .. 2^26
SMALL_LOG2 = (8, 11)     # --small: quick CPU runs and CI
# Row widths people have: powers of two and not (experts, vocabularies, hidden sizes, odd leftovers)
WIDTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 96, 100, 197, 384, 768, 1000, 1536, 3000, 5120,
          11008, 32000, 50257, 7, 12, 33)
FACTORS = (2, 3, 4, 8, 12, 16, 32, 64, 49, 100, 128, 197, 256, 1000)
DTYPES = {"float32": 5, "bfloat16": 3, "float16": 3, "int8": 1}
HALF = ("float16", "bfloat16")
HEADER = "import torch\nimport torch.nn.functional as F\n\n\n"


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------

@dataclass
class Arg:
    """One tensor argument: stored contiguous with `shape`, passed as `stored.permute(view)` where
    `view` is set (a transposed argument). fill: randn | positive (0.5..1.5) | int8 | mask (10% True)
    | index (0..high-1)."""
    name: str
    shape: tuple
    dtype: str
    fill: str = "randn"
    view: tuple | None = None
    high: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def passed_shape(self) -> tuple:
        return tuple(self.shape[i] for i in self.view) if self.view else self.shape

    def make(self, device: str, seed: int) -> torch.Tensor:
        """The argument on `device`, drawn there from a generator seeded with `seed`."""
        gen = torch.Generator(device=device).manual_seed(seed)
        kw = {"generator": gen, "device": device}
        if self.fill == "int8":
            t = torch.randint(-127, 128, self.shape, dtype=torch.int8, **kw)
        elif self.fill == "mask":
            t = torch.rand(self.shape, **kw) < 0.1
        elif self.fill == "index":
            t = torch.randint(0, self.high, self.shape, **kw)
        elif self.fill == "positive":
            t = (torch.rand(self.shape, **kw) + 0.5).to(getattr(torch, self.dtype))
        else:
            t = torch.randn(self.shape, **kw).to(getattr(torch, self.dtype))
        return t.permute(self.view) if self.view else t


    def meta(self) -> torch.Tensor:
        """The argument's shape, dtype and strides without data (compiling only)."""
        t = torch.empty(self.shape, dtype=getattr(torch, self.dtype), device="meta")
        return t.permute(self.view) if self.view else t


def make_args(args: list[Arg], device: str, seed: int) -> tuple:
    return tuple(a.make(device, seed * 101 + i) for i, a in enumerate(args))


@dataclass
class PerfProgram:
    """A program of the performance fuzzer: `source` defines `f`; `args` make its inputs."""
    name: str
    source: str
    args: list[Arg]
    tags: tuple = ()
    summary: str = ""
    size: int = 0      # elements of the tensor the program starts from (an outer product's, for two vectors)

    def module_text(self) -> str:
        return (f"# babytriton performance fuzzer: {self.name}: {self.summary}\n{HEADER}{self.source}\n\n"
                f"ARGS = {[(a.name, a.shape, a.dtype, a.fill, a.view, a.high) for a in self.args]!r}\n")


# --------------------------------------------------------------------------------------------------
# values of the program being written
# --------------------------------------------------------------------------------------------------

@dataclass
class V:
    """An expression: `code` (a name or short expression), its shape and dtype, and a rough bound on
    its magnitude (how large its values get on randn inputs)."""
    code: str
    shape: tuple
    dtype: str
    mag: float = 5.0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def half(self) -> bool:
        return self.dtype in HALF


def promoted(*dtypes: str) -> str:
    """torch's result dtype of float tensors of these dtypes."""
    order = ("float16", "bfloat16")
    floats = [d for d in dtypes if d != "int8"]
    if "float32" in floats or len(set(floats)) > 1 and set(floats) >= set(order):
        return "float32"
    return floats[0] if floats else "float32"


def limit(dtype: str) -> float:
    """Magnitudes the generator lets a value reach in this dtype (far from overflow)."""
    return 2e3 if dtype in HALF else 1e6


# Element-wise steps on one value: code template over {x}, the magnitude after it (from the one
# before), and the largest magnitude it takes (exp, squares).
UNARY = [
    ("F.gelu({x})", lambda m: m, 1e9), ("F.silu({x})", lambda m: m, 1e9), ("torch.tanh({x})", lambda m: 1.0, 1e9),
    ("torch.sigmoid({x})", lambda m: 1.0, 1e9), ("torch.relu({x})", lambda m: m, 1e9),
    ("torch.erf({x})", lambda m: 1.0, 1e9), ("torch.exp(-{x} * {x})", lambda m: 1.0, 40),
    ("torch.rsqrt({x} * {x} + 1.0)", lambda m: 1.0, 40), ("torch.log1p({x}.abs())", lambda m: math.log1p(m), 1e9),
    ("torch.sqrt({x}.abs() + 1e-3)", lambda m: math.sqrt(m) + 1, 1e9), ("{x}.clamp(-3.0, 3.0)", lambda m: min(m, 3.0), 1e9),
    ("torch.clamp({x}, min=0.0)", lambda m: m, 1e9), ("F.softplus({x})", lambda m: m + 1, 1e9),
    ("F.mish({x})", lambda m: m, 1e9), ("F.hardswish({x})", lambda m: m, 1e9),
    ("F.leaky_relu({x}, 0.1)", lambda m: m, 1e9), ("torch.sin({x})", lambda m: 1.0, 1e9),
    ("torch.cos({x})", lambda m: 1.0, 1e9), ("{x}.abs()", lambda m: m, 1e9), ("{x} * {x}", lambda m: m * m, 30),
    ("{x} * 0.5", lambda m: m * 0.5, 1e9), ("1.5 * {x} + 0.25", lambda m: 1.5 * m + 0.25, 1e9),
    ("-{x}", lambda m: m, 1e9), ("torch.exp({x})", lambda m: math.exp(m), 6),
    ("{x} * torch.sigmoid(1.702 * {x})", lambda m: m, 1e9), ("torch.tanh({x}) * 2.0 - {x} * 0.1", lambda m: 2 + 0.1 * m, 1e9),
]
# Two values (b broadcast to a): code over {a} and {b}, the magnitude from theirs.
BINARY = [
    ("{a} + {b}", lambda a, b: a + b), ("{a} - {b}", lambda a, b: a + b), ("{a} * {b}", lambda a, b: a * b),
    ("torch.maximum({a}, {b})", max), ("torch.where({a} > {b}, {a}, {b} * 0.5)", max),
    ("torch.where({b} > 0, {a}, 0.0)", lambda a, b: a), ("{a} / (1.0 + {b} * {b})", lambda a, b: a),
    ("{a} * torch.sigmoid({b})", lambda a, b: a), ("{a} + 0.1 * {b}", lambda a, b: a + 0.1 * b),
]


def axis_sets(ndim: int) -> list[tuple]:
    """Every non-empty set of axes of a rank-`ndim` tensor (for ndim 4: 15)."""
    return [c for k in range(1, ndim + 1) for c in itertools.combinations(range(ndim), k)]


def axis_kind(axes: tuple, ndim: int) -> str:
    """inner (the last axis), outer (the first), middle, all, or several."""
    if len(axes) == ndim:
        return "all"
    if len(axes) > 1:
        return "several"
    return "inner" if axes[0] == ndim - 1 else "outer" if axes[0] == 0 else "middle"


# --------------------------------------------------------------------------------------------------
# the generator
# --------------------------------------------------------------------------------------------------

class Writer:
    """Writes one program: parameters, statements, results, tags."""

    def __init__(self, rng: random.Random, log2: tuple):
        self.rng = rng
        self.log2 = log2
        self.args: list[Arg] = []
        self.lines: list[str] = []
        self.outputs: list[V] = []
        self.tags: list[str] = []
        self.used: set[str] = set()
        self.stream: V | None = None
        self.input_dtype = "float32"
        self.size = 0

    # names -----------------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        for i in itertools.count():
            name = base if i == 0 else f"{base}{i + 1}"
            if name not in self.used:
                self.used.add(name)
                return name
        raise AssertionError

    def assign(self, base: str, v: V) -> V:
        """`name = code`; the value under its new name."""
        name = self.fresh(base) if base != "h" else "h"
        self.used.add(name)
        self.lines.append(f"    {name} = {v.code}")
        return V(name, v.shape, v.dtype, v.mag)

    def param(self, base: str, shape: tuple, dtype: str, fill: str = "randn", view=None, high: int = 0) -> str:
        name = self.fresh(base)
        stored = shape if view is None else tuple(shape[i] for i in inverse(view))
        self.args.append(Arg(name, stored, dtype, fill, view, high))
        return name

    # shapes ----------------------------------------------------------------------------------------
    def main_shape(self) -> tuple:
        """A shape of 2^lo..2^hi elements, rank 1-4, the widest axis usually (not always) last."""
        rng = self.rng
        total = 2 ** rng.uniform(*self.log2)
        rank = rng.choices((1, 2, 3, 4), (1, 5, 3, 2))[0]
        if rank == 1:
            return (round(total),)
        widths = [w for w in WIDTHS if w <= total / 2] or [2]
        dims = [rng.choice(widths)]
        left = total / dims[0]
        for _ in range(rank - 2):
            factors = [f for f in FACTORS if f <= left / 2] or [1]
            dims.insert(0, rng.choice(factors))
            left /= dims[0]
        rest = math.prod(dims)
        dims.insert(0, max(1, min(max(2, round(left), math.ceil(2 ** self.log2[0] / rest)), 2 ** self.log2[1] // rest)))
        if rng.random() < 0.3:
            rng.shuffle(dims)
        return tuple(dims)

    def broadcast_shape(self, shape: tuple) -> tuple:
        """A shape that broadcasts to `shape`: full, one kept axis (a weight, a column), or a few."""
        rng = self.rng
        kind = rng.choice(("full", "full", "last", "one", "some"))
        if kind == "full" or len(shape) == 1:
            return shape
        if kind == "last":
            return shape[-1:]
        keep = {rng.randrange(len(shape))} if kind == "one" else set(rng.sample(range(len(shape)), len(shape) - 1))
        return tuple(d if i in keep else 1 for i, d in enumerate(shape))

    def other(self, shape: tuple, dtype: str, base: str = "y") -> V:
        """A second input broadcasting to `shape`, as users spell it: (n, 1) passed or unsqueezed,
        a full tensor maybe passed transposed (`b.T` as an argument) or transposed inside."""
        rng = self.rng
        bshape = self.broadcast_shape(shape)
        if bshape == shape and len(shape) >= 2 and rng.random() < 0.35:
            return self.transposed_input(shape, dtype, base)
        squeezed = tuple(d for d in bshape if d != 1)
        if 1 in bshape and len(squeezed) == 1 and rng.random() < 0.5:
            name = self.param(base, squeezed, dtype)
            return V(unsqueezed(name, bshape, rng), bshape, dtype, 5.0)
        return V(self.param(base, bshape, dtype), bshape, dtype, 5.0)

    def transposed_input(self, shape: tuple, dtype: str, base: str) -> V:
        """A full input whose contiguous axis is not the stream's: passed as a transposed view, or
        stored transposed and transposed inside (`b.T`, `b.transpose(0, 1)`, `b.permute(...)`)."""
        rng = self.rng
        n = len(shape)
        perm = tuple(range(n - 2)) + (n - 1, n - 2) if rng.random() < 0.6 else tuple(rng.sample(range(n), n))
        if perm == tuple(range(n)):
            perm = tuple(reversed(range(n)))
        if rng.random() < 0.5:
            self.tags.append("T-arg")
            return V(self.param(base, shape, dtype, view=perm), shape, dtype, 5.0)
        self.tags.append("T-inside")
        stored = tuple(shape[i] for i in perm)
        name = self.param(base, stored, dtype)
        inv = inverse(perm)
        if n == 2:
            code = rng.choice((f"{name}.T", f"{name}.transpose(0, 1)", f"{name}.t()", f"{name}.mT"))
        elif perm[:-2] == tuple(range(n - 2)):
            code = rng.choice((f"{name}.transpose(-1, -2)", f"{name}.mT"))
        else:
            code = f"{name}.permute{inv}"
        return V(code, shape, dtype, 5.0)

    # the program ---------------------------------------------------------------------------------
    def start(self) -> None:
        """The first input and the stream that the parts transform."""
        rng = self.rng
        shape = self.main_shape()
        self.size = math.prod(shape)
        if len(shape) == 1 and rng.random() < 0.3 and shape[0] >= 512:
            return self.start_outer(shape[0])
        dtype = rng.choices(list(DTYPES), list(DTYPES.values()))[0]
        self.tags.append(dtype)
        if dtype == "int8":
            return self.start_int8(shape)
        self.input_dtype = dtype
        x = V(self.param("x", shape, dtype), shape, dtype, 5.0)
        if dtype in HALF and rng.random() < 0.6:
            x = self.assign("h", V(rng.choice((f"{x.code}.float()", f"{x.code}.to(torch.float32)")), shape, "float32", 5.0))
            self.tags.append("upcast")
        self.stream = x

    def start_int8(self, shape: tuple) -> None:
        """Dequantise: an int8 input times a float scale per row or per column."""
        rng = self.rng
        q = self.param("q", shape, "int8", fill="int8")
        sshape = tuple(1 if i != len(shape) - 1 else d for i, d in enumerate(shape)) if rng.random() < 0.5 \
            else tuple(d if i != len(shape) - 1 else 1 for i, d in enumerate(shape))
        s = self.param("scale", sshape, "float32", fill="positive")
        self.stream = self.assign("h", V(f"{q}.float() * ({s} / 127.0)", shape, "float32", 1.5))

    def start_outer(self, n: int) -> None:
        """Two vectors and their outer product (or sum): an (n, m) stream from 1-d inputs."""
        rng = self.rng
        m = rng.choice([w for w in (64, 100, 128, 256, 1000, 4096) if w * 2 <= n] or [2])
        n = max(2, n // m, math.ceil(2 ** self.log2[0] / m))
        a, b = self.param("a", (n,), "float32"), self.param("b", (m,), "float32")
        code = rng.choice((f"{a}[:, None] * {b}[None, :]", f"torch.outer({a}, {b})", f"{a}.unsqueeze(1) + {b}.unsqueeze(0)"))
        self.tags.append("outer")
        self.size = n * m
        self.stream = self.assign("h", V(code, (n, m), "float32", 25.0))

    def bound(self) -> None:
        """Bring the stream's magnitude down where it has grown (a bounded function of it)."""
        s = self.stream
        if s.mag > limit(s.dtype) / 50:
            self.stream = self.assign("h", V(f"torch.tanh({s.code} * {1.0 / s.mag:.3g})", s.shape, s.dtype, 1.0))

    def pointwise(self) -> None:
        """An element-wise chain: 1-4 steps, unary functions and operations with other inputs."""
        rng = self.rng
        for _ in range(rng.randint(1, 4)):
            self.bound()
            s = self.stream
            if rng.random() < 0.35:
                o = self.other(s.shape, rng.choice((s.dtype, self.input_dtype, "float32")), "y")
                template, grow = rng.choice(BINARY)
                code = template.format(a=paren(s.code), b=paren(o.code))
                self.stream = self.assign("h", V(code, s.shape, promoted(s.dtype, o.dtype), grow(s.mag, o.mag)))
            else:
                fits = [(t, g) for t, g, top in UNARY if s.mag <= top]
                template, grow = rng.choice(fits)
                self.stream = self.assign("h", V(template.format(x=paren(s.code)), s.shape, s.dtype, grow(s.mag)))
        self.tags.append("pointwise")

    def choose_axes(self, ndim: int, single: bool = False) -> tuple:
        sets = axis_sets(ndim)
        if single:
            return (self.rng.randrange(ndim),) if self.rng.random() < 0.5 else (ndim - 1,)
        weights = [3 if len(a) == 1 else 1 for a in sets]
        return self.rng.choices(sets, weights)[0]

    def normalise(self) -> None:
        """A normalisation over some axes: centred and scaled, RMS, L2 or max-abs; maybe an affine."""
        rng = self.rng
        self.bound()
        s = self.stream
        axes = (s.ndim - 1,) if rng.random() < 0.5 else self.choose_axes(s.ndim)
        dim = dim_text(axes, s.ndim, rng)
        eps = rng.choice(("1e-5", "1e-6", "1e-12"))
        kind = rng.choice(("center", "center", "rms", "l2", "maxabs"))
        if kind == "center":
            mu = self.assign("mu", V(f"{s.code}.mean({dim}, keepdim=True)", s.shape, s.dtype, s.mag))
            d = self.assign("d", V(f"{s.code} - {mu.code}", s.shape, s.dtype, 2 * s.mag))
            var = rng.choice((f"({d.code} * {d.code}).mean({dim}, keepdim=True)", f"{d.code}.pow(2).mean({dim}, keepdim=True)",
                              f"{s.code}.var({dim}, keepdim=True, unbiased=False)"))
            v = self.assign("var", V(var, s.shape, s.dtype, s.mag ** 2))
            code = rng.choice((f"{d.code} * torch.rsqrt({v.code} + {eps})", f"{d.code} / torch.sqrt({v.code} + {eps})"))
        elif kind == "rms":
            ms = self.assign("ms", V(f"{s.code}.pow(2).mean({dim}, keepdim=True)", s.shape, s.dtype, s.mag ** 2))
            code = f"{s.code} * torch.rsqrt({ms.code} + {eps})"
        elif kind == "l2":
            code = (f"F.normalize({s.code}, dim={dim})" if len(axes) == 1 and rng.random() < 0.5 else
                    f"{s.code} / {s.code}.norm(dim={dim}, keepdim=True).clamp_min(1e-6)" if len(axes) == 1 else
                    f"{s.code} / torch.linalg.vector_norm({s.code}, dim={dim}, keepdim=True).clamp_min(1e-6)")
        else:
            code = f"{s.code} / ({s.code}.abs().amax({dim}, keepdim=True) + 1e-6)"
        self.stream = self.assign("h", V(code, s.shape, s.dtype, 6.0))
        self.tags.append(f"norm-{axis_kind(axes, s.ndim)}")
        if rng.random() < 0.6:
            self.affine()

    def affine(self) -> None:
        """`h * w + b` with w, b along one or more axes of the stream."""
        s = self.stream
        w = self.other(s.shape, self.rng.choice((self.input_dtype, "float32")), "w")
        code = f"{s.code} * {paren(w.code)}"
        if self.rng.random() < 0.5:
            code += f" + {self.param('bias', w.shape, w.dtype)}"
        self.stream = self.assign("h", V(code, s.shape, promoted(s.dtype, w.dtype), 40.0))

    def softmax(self) -> None:
        """A softmax (library or composed) over one axis, maybe scaled, soft-capped or masked."""
        rng = self.rng
        self.bound()
        s = self.stream
        axis = self.choose_axes(s.ndim, single=True)[0]
        dim = rng.choice((str(axis), str(axis - s.ndim)))
        x = s.code
        log = rng.random() < 0.25
        pre = rng.random()
        mag = 30.0 if log else 1.0
        if pre < 0.2:
            x = self.assign("h", V(f"{paren(x)} / 0.7", s.shape, s.dtype)).code
        elif pre < 0.35:
            x = self.assign("h", V(f"30.0 * torch.tanh({paren(x)} / 30.0)", s.shape, s.dtype)).code
            self.tags.append("softcap")
        elif pre < 0.5:
            x = self.masked(x, axis, log)
            mag = 1e4 if log else mag
        style = rng.random()
        if style < 0.4:
            fn = "log_softmax" if log else "softmax"
            code = rng.choice((f"torch.{fn}({x}, dim={dim})", f"F.{fn}({x}, dim={dim})", f"{x}.{fn}({dim})"))
        else:
            m = self.assign("m", V(rng.choice((f"{x}.amax({dim}, keepdim=True)", f"{x}.max(dim={dim}, keepdim=True).values")),
                                   s.shape, s.dtype))
            if log:
                z = self.assign("z", V(f"{x} - {m.code}", s.shape, s.dtype))
                code = f"{z.code} - torch.log(torch.exp({z.code}).sum({dim}, keepdim=True))"
            else:
                e = self.assign("e", V(f"torch.exp({x} - {m.code})", s.shape, s.dtype))
                code = f"{e.code} / {e.code}.sum({dim}, keepdim=True)"
        self.stream = self.assign("h", V(code, s.shape, s.dtype, mag))
        self.tags.append(f"softmax-{axis_kind((axis,), s.ndim)}")

    def masked(self, x: str, axis: int, log: bool) -> str:
        """Masked entries before a softmax over `axis`: -inf where no row can be all masked and no
        log-softmax makes it a value (-inf * 0 is NaN), a large negative number otherwise."""
        rng = self.rng
        s = self.stream
        mshape = tuple(d if i == axis or rng.random() < 0.5 else 1 for i, d in enumerate(s.shape))
        mname = self.param("mask", mshape, "bool", fill="mask")
        fill = "float('-inf')" if s.shape[axis] >= 16 and not log else "-1e4"
        code = rng.choice((f"{x}.masked_fill({mname}, {fill})", f"torch.where({mname}, {fill}, {x})"))
        self.tags.append("masked")
        return self.assign("h", V(code, s.shape, s.dtype)).code

    def reduce(self) -> None:
        """A result reduced over some axes (the stream goes on), or a pooled stream."""
        rng = self.rng
        s = self.stream
        axes = self.choose_axes(s.ndim)
        dim = dim_text(axes, s.ndim, rng)
        whole = len(axes) == s.ndim and rng.random() < 0.5
        one = len(axes) == 1
        ops = REDUCE_ALL if whole else REDUCE + (REDUCE_ONE if one else [])
        template, wide = rng.choice(ops)
        # users sum half values in float32 (a half sum overflows); other reductions either way
        x = f"{s.code}.float()" if s.half and (wide or rng.random() < 0.4) else s.code
        code = template.format(x=x, dim=dim)
        if one and rng.random() < 0.2:  # max and argmax of the same rows, as torch.max returns them
            vals, idx = self.fresh("vals"), self.fresh("idx")
            self.lines.append(f"    {vals}, {idx} = {s.code}.max(dim={dim})")
            self.outputs += [V(vals, (), s.dtype), V(idx, (), "int64")]
            self.tags.append(f"max-argmax-{axis_kind(axes, s.ndim)}")
            return
        out = self.assign("r", V(code, (), s.dtype))
        self.outputs.append(out)
        self.tags.append(f"reduce-{axis_kind(axes, s.ndim)}")

    def pool(self) -> None:
        """The stream pooled (mean or max) over one axis, where enough is left to go on."""
        s = self.stream
        axes = [a for a in range(s.ndim) if math.prod(s.shape) // s.shape[a] >= 2 ** 12]
        if s.ndim < 2 or not axes:
            return self.reduce()
        a = self.rng.choice(axes)
        code = self.rng.choice((f"{s.code}.mean(dim={a})", f"{s.code}.amax(dim={a})", f"{s.code}.max(dim={a})[0]"))
        shape = s.shape[:a] + s.shape[a + 1:]
        self.stream = self.assign("h", V(code, shape, s.dtype, s.mag))
        self.tags.append(f"pool-{axis_kind((a,), s.ndim)}")

    def scan(self) -> None:
        """A cumulative sum (in float32) over one axis, then brought back to scale."""
        s = self.stream
        axis = self.choose_axes(s.ndim, single=True)[0]
        x = f"{s.code}.float()" if s.half else s.code
        code = self.rng.choice((f"torch.cumsum({x}, dim={axis})", f"{x}.cumsum({axis})"))
        mag = s.mag * math.sqrt(s.shape[axis]) * 3
        self.stream = self.assign("h", V(code, s.shape, "float32", mag))
        self.tags.append(f"scan-{axis_kind((axis,), s.ndim)}")

    def halves(self) -> None:
        """Two halves of one axis (`chunk` / `split`) combined as a gated unit: a * F.gelu(b)."""
        rng = self.rng
        self.bound()
        s = self.stream
        axes = [a for a in range(s.ndim) if s.shape[a] % 2 == 0 and s.shape[a] >= 4]
        if not axes:
            return self.pointwise()
        axis = s.ndim - 1 if s.ndim - 1 in axes and rng.random() < 0.7 else rng.choice(axes)
        a, b = self.fresh("a"), self.fresh("g")
        half = s.shape[axis] // 2
        split = rng.choice((f"{s.code}.chunk(2, dim={axis})", f"torch.chunk({s.code}, 2, dim={axis})",
                            f"{s.code}.split({half}, dim={axis})"))
        self.lines.append(f"    {a}, {b} = {split}")
        gate = rng.choice((f"{a} * F.gelu({b})", f"F.silu({a}) * {b}", f"{a} * torch.sigmoid({b})",
                           f"{a} * torch.erf({b})", f"F.gelu({a}, approximate='tanh') * {b}"))
        shape = s.shape[:axis] + (half,) + s.shape[axis + 1:]
        self.stream = self.assign("h", V(gate, shape, s.dtype, s.mag * s.mag))
        self.tags.append("halves")

    def transpose(self) -> None:
        """The stream transposed or permuted, then combined with an input laid out the new way."""
        rng = self.rng
        s = self.stream
        if s.ndim < 2:
            return self.pointwise()
        if s.ndim == 2 or rng.random() < 0.5:
            i, j = sorted(rng.sample(range(s.ndim), 2))
            code = f"{s.code}.T" if s.ndim == 2 and rng.random() < 0.5 else f"{s.code}.transpose({i}, {j})"
            perm = list(range(s.ndim))
            perm[i], perm[j] = perm[j], perm[i]
        else:
            perm = rng.sample(range(s.ndim), s.ndim)
            code = f"{s.code}.permute({', '.join(map(str, perm))})"
        shape = tuple(s.shape[p] for p in perm)
        dtype = rng.choice((s.dtype, self.input_dtype))
        o = V(self.param("y", shape, dtype), shape, dtype)
        template, grow = rng.choice(BINARY[:4])
        self.stream = self.assign("h", V(template.format(a=paren(code), b=o.code), shape,
                                         promoted(s.dtype, o.dtype), grow(s.mag, 5.0)))
        self.tags.append("transpose")

    def grouped(self) -> None:
        """Statistics over groups of an axis: `h.reshape(n, g, -1)`, normalised, reshaped back."""
        rng = self.rng
        self.bound()
        s = self.stream
        if s.ndim < 2:
            return self.normalise()
        rest = math.prod(s.shape[1:])
        groups = [g for g in (2, 4, 8, 16, 32) if s.shape[1] % g == 0 and rest // g >= 2]
        if not groups:
            return self.normalise()
        g = rng.choice(groups)
        lead = rng.choice((str(s.shape[0]), f"{s.code}.shape[0]"))
        grouped = self.assign("hg", V(f"{s.code}.reshape({lead}, {g}, -1)", (s.shape[0], g, rest // g), s.dtype, s.mag))
        mu = self.assign("mu", V(f"{grouped.code}.mean(-1, keepdim=True)", (), s.dtype))
        var = self.assign("var", V(f"{grouped.code}.var(-1, keepdim=True, unbiased=False)", (), s.dtype))
        normed = f"(({grouped.code} - {mu.code}) / torch.sqrt({var.code} + 1e-5))"
        shape_text = rng.choice((f"{s.code}.shape", ", ".join(map(str, s.shape))))
        self.stream = self.assign("h", V(f"{normed}.reshape({shape_text})", s.shape, s.dtype, 6.0))
        self.tags.append("grouped")

    def residual(self) -> None:
        """`h + r` with a residual input of the stream's shape (maybe saved as a second result)."""
        s = self.stream
        r = V(self.param("res", s.shape, self.input_dtype), s.shape, self.input_dtype)
        self.stream = self.assign("h", V(f"{s.code} + {r.code}", s.shape, promoted(s.dtype, r.dtype), s.mag + 5))
        if self.rng.random() < 0.5:
            self.outputs.append(self.assign("resid", V(self.stream.code, s.shape, self.stream.dtype)))
        self.tags.append("residual")

    def quantise(self) -> None:
        """An int8 result: `round(h / scale)` clamped, with a scale from the rows' absolute max."""
        rng = self.rng
        s = self.stream
        axis = rng.choice((-1, 0)) if s.ndim > 1 else -1
        sc = self.assign("qs", V(f"{s.code}.abs().amax(dim={axis}, keepdim=True).clamp_min(1e-5) / 127.0", (), s.dtype))
        code = f"torch.clamp(torch.round({s.code} / {sc.code}), -127, 127).to(torch.int8)"
        self.outputs.append(self.assign("q8", V(code, s.shape, "int8")))
        self.tags.append("quantise")

    def finish(self) -> str:
        """The stream cast back to the input dtype (where it was upcast), and the results."""
        s = self.stream
        if s.dtype != self.input_dtype and self.input_dtype in HALF and self.rng.random() < 0.8:
            s = V(self.rng.choice((f"{paren(s.code)}.to({self.args[0].name}.dtype)", f"{paren(s.code)}.to(torch.{self.input_dtype})")),
                  s.shape, self.input_dtype)
        results = [s] + self.outputs[:3]
        if len(results) > 1:
            self.tags.append("multi-output")
        self.lines.append(f"    return {', '.join(r.code for r in results)}")
        params = ", ".join(a.name for a in self.args)
        return f"def f({params}):\n" + "\n".join(self.lines) + "\n"


# Reductions: code over {x} and {dim}, and whether a half input is summed in float32 first.
REDUCE = [("{x}.sum({dim})", True), ("{x}.mean({dim})", False), ("{x}.amax({dim})", False), ("{x}.amin({dim})", False),
          ("torch.sum({x} * {x}, dim={dim})", True), ("{x}.abs().mean({dim})", False), ("{x}.std({dim})", False),
          ("torch.linalg.vector_norm({x}, dim={dim})", True), ("torch.mean({x}, dim={dim}, keepdim=True)", False)]
REDUCE_ONE = [("{x}.argmax({dim})", False), ("torch.logsumexp({x}, dim={dim})", False), ("{x}.var({dim})", False),
              ("torch.argmin({x}, dim={dim})", False)]
REDUCE_ALL = [("{x}.sum()", True), ("{x}.mean()", False), ("{x}.amax()", False), ("torch.mean({x} * {x})", False),
              ("{x}.abs().max()", False)]

PARTS = [("pointwise", 6), ("normalise", 4), ("softmax", 3), ("reduce", 4), ("pool", 1), ("scan", 1),
         ("halves", 2), ("transpose", 2), ("grouped", 1), ("residual", 2), ("quantise", 1)]


def generate(seed: int, index: int, log2: tuple = LOG2) -> PerfProgram:
    """Program `index` of the run seeded `seed`: the same text and inputs every time."""
    rng = random.Random(seed * 1_000_003 + index)
    w = Writer(rng, log2)
    w.start()
    names, weights = zip(*PARTS)
    for part in rng.choices(names, weights, k=rng.randint(1, 4)):
        getattr(w, part)()
    source = w.finish()
    tags = tuple(dict.fromkeys(w.tags))
    shapes = " ".join(f"{a.name}{list(a.passed_shape)}{'T' if a.view else ''}:{short(a.dtype)}" for a in w.args)
    return PerfProgram(f"p{index}", source, w.args, tags, f"{shapes}; {' '.join(t for t in tags if t not in DTYPES)}", w.size)


# --------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------

def inverse(perm) -> tuple:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def paren(code: str) -> str:
    simple = code.replace("_", "").replace(".", "").isalnum()
    return code if simple or code.endswith(")") and code.count("(") == 1 and code.split("(")[0].replace(".", "").isalnum() \
        else f"({code})"


def dim_text(axes: tuple, ndim: int, rng: random.Random) -> str:
    """A `dim` argument as people write it: an int (maybe negative) or a tuple."""
    spelled = [a - ndim if rng.random() < 0.4 else a for a in axes]
    return str(spelled[0]) if len(spelled) == 1 else f"({', '.join(map(str, spelled))})"


def unsqueezed(name: str, bshape: tuple, rng: random.Random) -> str:
    """A 1-d input indexed up to `bshape` (one axis kept): `s[:, None]`, `s.unsqueeze(-1)`, `s.view(...)`."""
    keep = next(i for i, d in enumerate(bshape) if d != 1)
    n = len(bshape)
    index = ", ".join(":" if i == keep else "None" for i in range(n))
    view = ", ".join("-1" if i == keep else "1" for i in range(n))
    choices = [f"{name}[{index}]", f"{name}.view({view})", f"{name}.reshape({view})"]
    if keep == 0 and n == 2:
        choices.append(f"{name}.unsqueeze(-1)")
    return rng.choice(choices)


def short(dtype: str) -> str:
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "bool": "bool", "int64": "i64"}[dtype]
