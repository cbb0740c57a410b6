"""Element-wise torch functions and methods: math, activations, comparisons, dtype conversions."""
from __future__ import annotations

import torch

from .registry import op, tensor, torch_rule

# torch name -> the library's Relax operator computing it element-wise, one tensor in, one out.
UNARY = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan",
    "tanh": "tanh", "sigmoid": "sigmoid", "abs": "abs", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
    "erf": "erf", "neg": "negative", "negative": "negative", "sign": "sign", "square": "square",
}


def _unary(torch_name: str, relax_name: str):
    def rule(b, input):
        return op(b, relax_name, tensor(b, input, f"torch.{torch_name}()"))
    rule.__name__ = torch_name
    return rule


for _name, _relax in UNARY.items():
    _callables = [f for f in (getattr(torch, _name, None), getattr(torch.Tensor, _name, None)) if f is not None]
    torch_rule(*_callables, methods=(_name,))(_unary(_name, _relax))
