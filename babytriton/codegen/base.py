"""What the two backends' visitors share: the one error path, the rejection of syntax they don't
take, and the desugarings that don't depend on the IR (`x += y`, `a < b < c`)."""
from __future__ import annotations

import ast

from ..errors import CompilationError, Diagnostic, debug_enabled

SYNTAX_NAMES = {
    "Lambda": "lambda expressions", "ListComp": "list comprehensions", "SetComp": "set comprehensions",
    "DictComp": "dict comprehensions", "GeneratorExp": "generator expressions", "ClassDef": "class definitions",
    "FunctionDef": "nested function definitions", "Try": "try/except blocks", "TryStar": "try/except* blocks",
    "Global": "`global` statements", "Nonlocal": "`nonlocal` statements", "JoinedStr": "f-strings",
    "With": "`with` blocks", "Raise": "`raise` statements", "Assert": "`assert` statements",
    "Delete": "`del` statements", "Import": "imports", "ImportFrom": "imports", "Yield": "`yield` expressions",
    "YieldFrom": "`yield from` expressions", "Await": "`await` expressions", "Starred": "star-expressions (*args)",
    "Dict": "dict literals", "Set": "set literals", "NamedExpr": "assignment expressions (`:=`)",
    "Slice": "slices",
    "Match": "`match` statements", "AsyncFor": "`async for`", "AsyncWith": "`async with`",
}


class CodeGenerator(ast.NodeVisitor):
    """Base of each backend's visitor. Subclasses set `self.parsed` and define `compare` and `logical`."""

    unsupported_suffix = ""  # added to "... are not supported in @jit functions"

    def visit(self, node):
        """Every failure below this node becomes one CompilationError located at the innermost node."""
        try:
            return super().visit(node)
        except CompilationError:
            raise
        except Diagnostic as e:
            raise self.error(node, str(e)) from (e if debug_enabled() else None)
        except RecursionError:
            raise self.error(node, "expression nested too deeply to compile") from None
        except Exception as e:  # noqa: BLE001 - TVM raises many types; none may reach the user raw
            message = f"could not compile `{ast.unparse(node)}`: the compiler failed on it"
            if debug_enabled():
                raise self.error(node, f"{message}\n[BABYTRITON_DEBUG] {type(e).__name__}: {e}") from e
            raise self.error(node, message + " (set BABYTRITON_DEBUG=1 to see the cause)") from None

    def error(self, node, message: str) -> CompilationError:
        return self.parsed.source_map.error(node, message)

    def generic_visit(self, node):
        what = SYNTAX_NAMES.get(type(node).__name__, f"`{type(node).__name__}` nodes")
        raise Diagnostic(f"{what} are not supported in @jit functions{self.unsupported_suffix}")

    # ------------------------------------------------------------------------------------------
    # desugarings
    # ------------------------------------------------------------------------------------------
    def visit_Pass(self, node):
        pass

    def visit_AugAssign(self, node: ast.AugAssign):
        # x += y is x = x + y; a[i] += y is a[i] = a[i] + y.
        fields = {f: getattr(node.target, f) for f in node.target._fields}
        load = ast.copy_location(type(node.target)(**{**fields, "ctx": ast.Load()}), node.target)
        binop = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        self.visit(ast.copy_location(ast.Assign([node.target], binop), node))

    def visit_Constant(self, node: ast.Constant):
        # Numbers are compile-time values; strings only mean something as arguments (dtype names).
        if isinstance(node.value, (bool, int, float, str)) or node.value is None:
            return node.value
        raise Diagnostic(f"constants of type {type(node.value).__name__} are not supported")

    def visit_Compare(self, node: ast.Compare):
        # a < b < c means (a < b) and (b < c), with b computed once.
        left = self.visit(node.left)
        result = None
        for op, comparator in zip(node.ops, node.comparators):
            right = self.visit(comparator)
            part = self.compare(op, left, right)
            result = part if result is None else self.logical(ast.And(), result, part)
            left = right
        return result
