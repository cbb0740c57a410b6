"""A program's parameters (`Param`) and the arguments made from their specs, the same on every run."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.types import DTYPES
from .values import FLOATS


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
