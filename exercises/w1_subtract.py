# Warm-up 1 - subtraction: `a - b` on tensors
#
# Chapter 07 taught the code generator one operator, `+`, through a table
# from Python's AST operator classes to Relax ops (`ast.Add: R.add`);
# chapter 13 still knows only that one. Teach it `-`: in visit_BinOp, an
# `ast.Sub` node becomes Relax's subtract of the two compiled operands
# (look in tvm.relax.op for its name), and every other operator goes to
# the chapter before, as it does now.
#
# Check your answer with `pytest exercises -k w1_subtract`; the solution is
# exercises/solutions/w1_subtract.py. Then try the article's exercise 1
# (multiplication), exercises/14_operators.py.
#
# Run: python exercises/w1_subtract.py
import ast
import importlib
import pathlib
import sys

import torch
from tvm import relax as rx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))  # chapter 13 is there
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def visit_BinOp(self, node):
        if isinstance(node.op, ast.Sub):
            raise NotImplementedError("warm-up 1 (subtraction): CodeGenerator.visit_BinOp for `-`")
        return super().visit_BinOp(node)


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def diff(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a - b

    print(diff.codegen().script())
    a, b = torch.rand(2, 3), torch.rand(2, 3)
    torch.testing.assert_close(diff(Tensor.of(a), Tensor.of(b)), a - b)
    print("a - b matches torch")
    assert "R.subtract(a, b)" in diff.codegen().script()
