"""Reductions and scans as torch spells them: `dim`, `keepdim`, (values, indices) pairs."""
from __future__ import annotations

import torch

from .registry import dims, op, tensor, torch_rule


@torch_rule(torch.sum, torch.Tensor.sum, methods=("sum",))
def sum_(b, input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch.sum; the Relax spelling (`axis=`, `keepdims=`) means the same here."""
    x = tensor(b, input, "torch.sum()")
    axes = dims(b, x, axis if axis is not None else dim, "torch.sum()")
    if dtype is not None:
        x = op(b, "astype", x, dtype)
    return op(b, "sum", x, axes, keepdim if keepdims is None else keepdims)
