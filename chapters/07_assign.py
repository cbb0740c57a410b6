# Chapter 07 - assignment, a symbol table, constants and `+`
#
# What: the first chapter that computes something. Four new visitor methods:
#   - `visit_Constant` turns a Python number into a Relax constant, a 0-d
#     tensor (`R.const(1, "int32")`);
#   - `visit_BinOp` looks the operator up in a table and builds the Relax call
#     (`R.add` for `+`; more operators are one more table entry each);
#   - `visit_Assign` emits the value as a binding and names the new Relax
#     variable after the Python one;
#   - `visit_Name` finds that variable again through the symbol table.
# `visit_Return` from chapter 06 now has values to return.
#
# Why: Relax, like most compiler IRs, has no mutable variables. Each `emit`
# creates a fresh variable bound once to a value. The symbol table is the map
# from Python names to those variables: assigning a name again just points it
# at a newer variable. Expressions return unemitted Relax expressions, and the
# statement that consumes them decides how they are bound; `R.add` of
# constants that is never assigned is bound to a generated name (`gv...`).
#
# Dtypes: a Python int becomes int32 and a float becomes float32 (what
# `rx.const` picks). Relax refuses to add tensors of different dtypes, which is
# why mixing Python numbers with typed tensors needs care later on.
#
# What to look at: `one = R.const(1, "int32")`, then `result = R.add(one, ...)`,
# then `return result`: the Python names survive into the IR, and the return
# type `R.Tensor((), dtype="int32")` is a 0-d integer tensor.
#
# Run: python chapters/07_assign.py
import ast
import importlib

from tvm import relax as rx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import relax as RB

ch06 = importlib.import_module("06_function")

BINARY_OPS = {ast.Add: rx.op.add}


class CodeGenerator(ch06.CodeGenerator):
    def __init__(self, fn):
        super().__init__(fn)
        self.symbols = {}  # Python name -> the Relax variable that currently holds its value

    def visit_Assign(self, node):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise self.error(node, "only `name = value` assignments are supported")
        name = node.targets[0].id
        self.symbols[name] = IRBuilder.name(name, RB.emit(self.visit(node.value)))

    def visit_Name(self, node):
        if node.id not in self.symbols:
            raise self.error(node, f"name {node.id!r} is not defined")
        return self.symbols[node.id]

    def visit_Constant(self, node):
        if type(node.value) not in (int, float):
            raise self.error(node, f"constant {node.value!r} is not a number")
        return rx.const(node.value)

    def visit_BinOp(self, node):
        op = BINARY_OPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        return op(self.visit(node.left), self.visit(node.right))


class JIT(ch06.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def one_plus_one():
        one = 1
        result = one + 1
        return result

    mod = one_plus_one()
    print(mod.script())

    print("Checking: `1 + 1` became R.add on a 0-d int32 constant; chapter 08 runs it")
    func = mod["one_plus_one"]
    bindings = func.body.blocks[0].bindings
    assert [b.var.name for b in bindings] == ["one", "result"]
    assert isinstance(bindings[1].value, rx.Call) and bindings[1].value.op.name == "relax.add"
    assert func.ret_ty.ndim == 0 and func.ret_ty.dtype == "int32"
