"""Distances in float32 units in the last place, for tests of approximations (fast_math's log, sin, cos)."""
from __future__ import annotations

import torch


def ordered(x: torch.Tensor) -> torch.Tensor:
    """float32 bits as int64 that order as the floats do: the difference of two is their ulp distance."""
    bits = x.view(torch.int32).long()
    return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def max_ulp(got: torch.Tensor, want: torch.Tensor) -> int:
    """The largest ulp distance between two float32 tensors, which must have their NaNs in the same places."""
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    return int((ordered(got[finite]) - ordered(want[finite])).abs().max()) if finite.any() else 0
