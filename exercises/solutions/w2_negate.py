# Warm-up 2, solved - a unary operator: `-a`
#
# `-a` is an `ast.UnaryOp` node (op `ast.USub`, one operand), a node kind
# no chapter up to 13 visits: chapter 06's generic_visit refuses it with a
# located SyntaxError. Write visit_UnaryOp: `-x` becomes Relax's negative
# of the compiled operand (tvm.relax.op has it); any other unary operator
# (`+x`, `~x`, `not x`) is still refused, through `self.generic_visit(node)`.
#
# Check your answer with `pytest exercises -k w2_negate`; the solution is
# exercises/solutions/w2_negate.py.
#
# Run: python exercises/solutions/w2_negate.py
import ast
import importlib
import pathlib
import sys

import torch
from tvm import relax as rx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "chapters"))  # chapter 13 is there
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def visit_UnaryOp(self, node):
        if not isinstance(node.op, ast.USub):
            return self.generic_visit(node)
        return rx.op.negative(self.visit(node.operand))


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def flip(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return -(a + b)

    print(flip.codegen().script())
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(flip(Tensor.of(a), Tensor.of(b)), -(a + b))
    print("-(a + b) matches torch")
    assert "R.negative(" in flip.codegen().script()
