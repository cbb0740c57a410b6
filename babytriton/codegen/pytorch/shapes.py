"""Views and shape changes as torch spells them: view, reshape, transpose, permute, unsqueeze, ..."""
from __future__ import annotations

import torch

from .registry import dim, op, tensor, torch_rule


@torch_rule(torch.transpose, torch.Tensor.transpose, methods=("transpose",))
def transpose(b, input, dim0, dim1):
    x = tensor(b, input, "torch.transpose()")
    axes = list(range(b.ndim(x)))
    i, j = dim(b, x, dim0, "torch.transpose()"), dim(b, x, dim1, "torch.transpose()")
    axes[i], axes[j] = axes[j], axes[i]
    return op(b, "permute_dims", x, axes)
