# Chapter 02 - read the function's source and parse it into an AST
#
# What: the JIT object fetches the text of the decorated function with
# `inspect.getsource` and hands it to `ast.parse`. The result is an abstract
# syntax tree (AST): the function as nested Python objects (`FunctionDef`,
# `Return`, `BinOp`, ...) instead of characters.
#
# Why: a compiler needs the *structure* of the code, not its result. Python
# would evaluate `a + b`; we want to see "a BinOp with op Add, whose operands
# are the names a and b", so that we can later emit a TVM add for it. The
# standard library's `ast` module does the parsing for us.
#
# One trap: `getsource` returns the lines exactly as written. A function defined
# inside a block (like the demo below, inside `if __name__ == ...`) starts with
# indentation, and `ast.parse` rejects indented top-level code.
# `textwrap.dedent` strips the common indentation first.
#
# What to look at: the `ast.dump` tree. Find `FunctionDef(name='add_one'`, its
# `decorator_list` (our `@jit` is part of the source), and the `BinOp` with
# `op=Add()` inside the `Return`.
#
# Run: python chapters/02_parse.py
import ast
import importlib
import inspect
import textwrap

ch01 = importlib.import_module("01_jit")


class JIT(ch01.JIT):
    def parse(self) -> ast.Module:
        return ast.parse(textwrap.dedent(inspect.getsource(self.fn)))

    def __call__(self, *args):
        tree = self.parse()
        print(ast.dump(tree, indent=2))
        return tree


jit = JIT


if __name__ == "__main__":

    @jit
    def add_one(x):
        return x + 1

    try:
        ast.parse(inspect.getsource(add_one.fn))
    except IndentationError as err:
        print(f"without dedent, ast.parse fails: IndentationError: {err.msg}\n")

    tree = add_one(41)

    print("\nChecking: the call returned the AST of add_one instead of 42")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef) and func.name == "add_one"
    assert isinstance(func.body[0], ast.Return) and isinstance(func.body[0].value.op, ast.Add)
