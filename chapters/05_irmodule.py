# Chapter 05 - an IRModule from TVM's IRBuilder
#
# What: the code generator starts producing TVM IR. `visit_Module` opens an
# `IRBuilder` and, inside it, an `I.ir_module()` frame, visits the module's
# statements, and returns the finished `tvm.IRModule`. The module is empty
# for now: the function definition still falls through to the generic walk of
# chapter 04, which emits nothing.
#
# Why: an IRModule is TVM's unit of compilation, a table of named functions
# (Relax functions for the graph of tensor ops, TIR PrimFuncs for the loops).
# The IRBuilder lets us build it the way the AST is shaped: each `with` frame
# is a scope, and whatever is emitted inside a frame lands in it. Python's
# `ast.Module` maps onto the IRModule, a `def` will map onto a function
# (chapter 06), a statement onto a binding (chapter 07).
#
# What to look at: the trace still shows the FunctionDef being walked, and the
# printed TVMScript is a module class with only `pass` in it.
#
# Run: python chapters/05_irmodule.py
import importlib

import tvm
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I

ch04 = importlib.import_module("04_visitor")


class CodeGenerator(ch04.CodeGenerator):
    def visit_Module(self, node):
        with IRBuilder() as ib:
            with I.ir_module():
                for stmt in node.body:
                    self.visit(stmt)
        return ib.get()


class JIT(ch04.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def empty():
        pass

    mod = empty()
    print("\nThe IRModule, printed as TVMScript:")
    print(mod.script())

    print("Checking: the call returned an (empty) IRModule")
    assert isinstance(mod, tvm.IRModule) and len(mod.functions) == 0
