"""Tensor arguments whose memory is a permuted or broadcast view of a compact tensor (`x.T`,
`x.permute(...)`, channels-last, `x.expand(...)`), passed without a copy.

Such an argument is handed to the compiled function as its compact storage view (the permutation
undone, each broadcast axis cut to size 1) and the function begins with `permute_dims` and
`broadcast_to` back to the caller's view, which the passes fold into the consumers' indexing
(passes/views.py). Anything else non-contiguous (gaps, a negative bit) is copied as before
(core/dlpack.py). A version is keyed on the layout (ArgSpec.layout): it reads memory in that order.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Layout:
    """How a tensor argument's memory holds the caller's view of it."""
    order: tuple[int, ...]       # storage axis k holds the caller's axis order[k]
    broadcast: tuple[int, ...]   # the caller's axes of stride 0, passed with size 1

    @property
    def inverse(self) -> tuple[int, ...]:
        """The `permute_dims` axes that bring the storage back to the caller's order."""
        inverse = [0] * len(self.order)
        for k, axis in enumerate(self.order):
            inverse[axis] = k
        return tuple(inverse)

    @property
    def permuted(self) -> bool:
        return self.order != tuple(range(len(self.order)))

    def unexpanded(self, shape: tuple) -> tuple:
        """The caller's shape with each broadcast axis of size 1."""
        return tuple(1 if axis in self.broadcast else n for axis, n in enumerate(shape))

    def storage_shape(self, shape: tuple) -> tuple:
        """The shape of the storage view passed for a caller's tensor of `shape`."""
        unexpanded = self.unexpanded(shape)
        return tuple(unexpanded[axis] for axis in self.order)

    def storage(self, t: torch.Tensor) -> torch.Tensor:
        """The compact view of `t`'s memory that the compiled function takes."""
        if self.broadcast:
            t = t[self.constants()["cut"]]
        return t.permute(self.order) if self.permuted else t

    def expression(self, read: str, suffix: str = "") -> str:
        """Python text making the storage view of the tensor `read` (names from `constants(suffix)`)."""
        if self.broadcast:
            read = f"{read}[cut{suffix}]"
        return f"{read}.permute(order{suffix})" if self.permuted else read

    def constants(self, suffix: str = "") -> dict:
        """The values `expression(..., suffix)` names: the index cutting broadcast axes, the order."""
        cut = tuple(slice(0, 1) if axis in self.broadcast else slice(None) for axis in range(len(self.order)))
        return {f"cut{suffix}": cut, f"order{suffix}": self.order}

    def __str__(self) -> str:
        parts = []
        if self.permuted:
            parts.append(f"permuted: memory order {self.order}")
        if self.broadcast:
            parts.append(f"broadcast along {'axis' if len(self.broadcast) == 1 else 'axes'} "
                         f"{', '.join(map(str, self.broadcast))}")
        return "; ".join(parts)


def layout_of(t: torch.Tensor) -> Layout | None:
    """The Layout of a non-contiguous tensor that is a permuted and/or broadcast view of compact memory;
    None for a contiguous one, an empty one, or one that needs a copy (gaps, a negative bit)."""
    if t.is_contiguous() or t.numel() == 0 or t.is_neg() or t.is_conj():
        return None
    shape, strides = tuple(t.shape), t.stride()
    broadcast = tuple(axis for axis, (n, s) in enumerate(zip(shape, strides)) if s == 0 and n > 1)
    sizes = [1 if axis in broadcast else n for axis, n in enumerate(shape)]
    moving = [axis for axis in range(len(shape)) if sizes[axis] > 1]   # a size-1 axis has no stride to speak of
    ranked = sorted(moving, key=lambda axis: -strides[axis])
    expected = 1
    for axis in reversed(ranked):
        if strides[axis] != expected:
            return None
        expected *= sizes[axis]
    order = list(range(len(shape)))   # size-1 axes stay where they are: the order depends on real strides only
    for slot, axis in zip(moving, ranked):
        order[slot] = axis
    return Layout(tuple(order), broadcast)
