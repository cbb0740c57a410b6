"""Whole programs: `generate(seed)`, the same program for the same seed."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .values import EPS, HEADER
from .arguments import Param
from .tables import HELPERS, LONG_SHARE
from .generator import Generator


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


def generate(seed: int) -> Program:
    """One random program, the same for the same seed."""
    if random.Random(seed * 7919 + 1).random() < LONG_SHARE:
        return generate_long(seed)
    return _generate(seed)


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
