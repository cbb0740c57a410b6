# Warm-up 3 - several results: `return a + b, a + a`
#
# Chapter 13 returns one tensor. `return x, y` is an `ast.Tuple` node, which
# no chapter up to 13 visits (chapter 06's generic_visit refuses it). Two
# gaps: the code generator must turn the tuple into a Relax tuple of the
# compiled elements (bind each element that is an operation with `RB.emit`
# first, so that its type is known), and the call must turn what the VM
# returns for a tuple (a TVM array of tensors) into a tuple of torch tensors
# (`torch.from_dlpack`, as chapter 09 does for one tensor).
#
# Check your answer with `pytest exercises -k w3_results`; the solution is
# exercises/solutions/w3_results.py.
#
# Run: python exercises/w3_results.py
import importlib
import pathlib
import sys

import torch
from tvm import relax as rx
from tvm.script.ir_builder import relax as RB

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))  # chapter 13 is there
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def visit_Tuple(self, node):
        raise NotImplementedError("warm-up 3 (several results): CodeGenerator.visit_Tuple")


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    def __call__(self, *args):
        """One result is a torch tensor (chapter 09); several come back as a tuple of them."""
        raise NotImplementedError("warm-up 3 (several results): JIT.__call__")


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def pair(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a + b, a + a

    print(pair.codegen().script())
    a, b = torch.rand(2, 3), torch.rand(2, 3)
    got = pair(Tensor.of(a), Tensor.of(b))
    assert isinstance(got, tuple) and len(got) == 2
    for g, want in zip(got, (a + b, a + a)):
        torch.testing.assert_close(g, want)
    print("both results match torch")
    assert "R.Tuple(" in pair.codegen().script()
