# Chapter 06 - a Relax function: name, body, `pass`, and a return value
#
# What: `visit_FunctionDef` opens an `RB.function()` frame inside the module,
# names it after the Python function, and visits the body. This chapter
# understands only the statements that produce no values: `pass`, a
# docstring, and a bare `return`.
#
# Why: Relax functions always return a value; there is no "falls off the end".
# A Python function without `return` gives None, and we translate that into an
# empty tuple, Relax's unit value. So a function that does nothing still
# compiles, to `return R.tuple()`.
#
# From here on the compiler must not silently skip what it does not know, as
# the walk of chapters 04-05 did: skipping `x = 1` would produce wrong code.
# `generic_visit` now raises a SyntaxError that points at the user's own line,
# so the traceback shows the offending code the way Python shows its own
# syntax errors. (TVM may add "Warning: BlockBuilder destroyed with remaining
# blocks!" on stderr: the half-built function is thrown away; this is harmless.)
# The trace printing of chapter 04 is switched off.
#
# What to look at: `@R.function def nothing() -> R.Tuple` with
# `return R.tuple()`, and the error for an assignment (chapter 07's job).
#
# Run: python chapters/06_function.py
import ast
import importlib
import inspect
import linecache

from tvm import relax as rx
from tvm.script.ir_builder import relax as RB

ch05 = importlib.import_module("05_irmodule")


class CodeGenerator(ch05.CodeGenerator):
    trace = False

    def error(self, node, message):
        """A SyntaxError located in the user's file, so Python's traceback shows their line."""
        filename = inspect.getsourcefile(self.fn)
        first = self.fn.__code__.co_firstlineno
        # The AST was parsed from the dedented function alone: shift back to file coordinates.
        first_line = linecache.getline(filename, first)
        column = node.col_offset + len(first_line) - len(first_line.lstrip()) + 1
        lineno = node.lineno + first - 1
        return SyntaxError(message, (filename, lineno, column, linecache.getline(filename, lineno)))

    def generic_visit(self, node):
        raise self.error(node, f"babytriton does not support {type(node).__name__} here yet")

    def visit_FunctionDef(self, node):
        failed = None
        try:
            with RB.function():
                RB.func_name(node.name)
                self.returned = False
                try:
                    self.visit(node.args)
                    for stmt in node.body:
                        self.visit(stmt)
                except SyntaxError as error:
                    # End the function, then raise: TVM warns "BlockBuilder destroyed with
                    # remaining blocks!" when it frees a frame that an exception left open.
                    failed = error
                if not self.returned:
                    RB.func_ret_value(rx.Tuple([]))
        except Exception:
            if failed is None:
                raise
            # else a frame inside it was left open too, so it could not end: the user's error first
        if failed is not None:
            raise failed

    def visit_arguments(self, node):
        starred = [a for a in (node.vararg, node.kwarg) if a]
        params = node.posonlyargs + node.args + node.kwonlyargs + starred
        if params:
            raise self.error(params[0], "parameters are not supported yet")

    def visit_Pass(self, node):
        pass

    def visit_Expr(self, node):
        """An expression used as a statement; only a string (a docstring) is allowed for now."""
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)

    def visit_Return(self, node):
        RB.func_ret_value(rx.Tuple([]) if node.value is None else self.visit(node.value))
        self.returned = True


class JIT(ch05.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def nothing():
        """A docstring is skipped; `pass` emits nothing; no `return` means an empty tuple."""
        pass

    mod = nothing()
    print(mod.script())
    print()

    @jit
    def assigns():
        x = 1
        return x

    try:
        assigns()
        raise AssertionError("an assignment should be refused in this chapter")
    except SyntaxError as err:
        print(f"refused, as expected: {err.msg}\n  {err.filename}:{err.lineno}: {err.text.strip()}\n")

    print("Checking: a Relax function named `nothing` that returns R.tuple()")
    func = mod["nothing"]
    assert len(func.params) == 0
    assert isinstance(func.ret_ty, rx.TupleType) and len(func.ret_ty.fields) == 0
