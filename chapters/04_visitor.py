# Chapter 04 - a code generator that walks the AST
#
# What: `CodeGenerator` is an `ast.NodeVisitor`. Calling `visit(node)` looks
# for a method named after the node's class (`visit_FunctionDef`,
# `visit_BinOp`, ...) and falls back to `generic_visit` when there is none.
# Here there are no specific methods yet: every node takes the generic path,
# which prints the node and walks on into its children.
#
# Why: this dispatch-by-class is the skeleton of the whole compiler. From
# chapter 05 on, each new Python construct we support is one more
# `visit_<Node>` method, added in a subclass, that emits TVM IR instead of
# printing. Anything without a method keeps falling through to
# `generic_visit`, which later chapters turn into a "not supported" error.
#
# What to look at: the indented trace, one line per node, in the order the
# visitor reaches them (depth first, fields in order). Note that even the
# "invisible" nodes show up: `Load`/`Store` contexts and the `Add` operator
# are nodes too, and the last `Name id='jit'` is the decorator. The call
# returns how many nodes were visited, and it matches what `ast.walk` counts.
#
# Run: python chapters/04_visitor.py
import ast
import importlib

ch03 = importlib.import_module("03_target")


class CodeGenerator(ast.NodeVisitor):
    trace = True  # print each node as it is visited

    def __init__(self, fn):
        self.fn = fn  # the Python function being compiled; later chapters read its annotations
        self.depth = 0

    def visit(self, node):
        if self.trace:
            fields = [f"{k}={v!r}" for k, v in ast.iter_fields(node) if isinstance(v, (str, int, float))]
            print("  " * self.depth + type(node).__name__, *fields)
        self.depth += 1
        try:
            return super().visit(node)
        finally:
            self.depth -= 1

    def generic_visit(self, node):
        """Walk into the children and count the nodes of this subtree.

        `ast.NodeVisitor.generic_visit` would walk too, but it throws the results away; counting
        makes the walk checkable.
        """
        return 1 + sum(self.visit(child) for child in ast.iter_child_nodes(node))


class JIT(ch03.JIT):
    CodeGenerator = CodeGenerator  # subclasses swap in the code generator of their chapter

    def codegen(self):
        return self.CodeGenerator(self.fn).visit(self.parse())

    def __call__(self, *args):
        return self.codegen()


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def add_one():
        x = 1
        return x + 1

    visited = add_one()

    total = len(list(ast.walk(add_one.parse())))
    print(f"\nvisited {visited} nodes; ast.walk finds {total}")
    print("Checking: the visitor reached every node of the tree")
    assert visited == total
