"""Modules using `from __future__ import annotations` (string annotations) work the same."""
from __future__ import annotations

import torch

import babytriton as bt


def scaled(a: bt.Tensor(("n", 4), "float32"), k: float):
    return a * k


def test_string_annotations_are_evaluated():
    f = bt.jit(scaled)
    assert [p.kind for p in f.params] == ["tensor", "scalar"]
    a = torch.randn(3, 4)
    torch.testing.assert_close(f(a, 2.5), a * 2.5)
