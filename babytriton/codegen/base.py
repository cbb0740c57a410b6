"""What the two backends' visitors share: the one error path, the rejection of syntax they don't
take, the desugarings that don't depend on the IR (`x += y`, `a < b < c`), and the statements and
expressions both compile alike (assignments, tuples, `and`/`or`, tuple indexing, name lookup)."""
from __future__ import annotations

import ast

import torch
from tvm import tirx
from tvm.script.ir_builder import IRBuilder

from ..frontend.arguments import ArgSpec
from ..core.errors import CompilationError, Diagnostic, debug_enabled
from . import semantic, specialise
from .scope import Scope
from ..frontend.source import ParsedFunction, environment
from ..core.types import format_size
from .values import PY_BUILTINS, PY_SCALARS, is_symbolic

SYNTAX_NAMES = {
    "Lambda": "lambda expressions", "SetComp": "set comprehensions",
    "DictComp": "dict comprehensions", "ClassDef": "class definitions",
    "FunctionDef": "nested function definitions", "Try": "try/except blocks", "TryStar": "try/except* blocks",
    "Global": "`global` statements", "Nonlocal": "`nonlocal` statements",
    "With": "`with` blocks", "Raise": "`raise` statements", "Assert": "`assert` statements",
    "Delete": "`del` statements", "Import": "imports", "ImportFrom": "imports", "Yield": "`yield` expressions",
    "YieldFrom": "`yield from` expressions", "Await": "`await` expressions", "Starred": "star-expressions (*args)",
    "Dict": "dict literals", "Set": "set literals", "NamedExpr": "assignment expressions (`:=`)",
    "Slice": "slices",
    "Match": "`match` statements", "AsyncFor": "`async for`", "AsyncWith": "`async with`",
}


# The builtins a comprehension may iterate with (over compile-time values).
ITERATION = {"range": range, "zip": zip, "enumerate": enumerate, "reversed": reversed}


class CodeGenerator(ast.NodeVisitor):
    """Base of each backend's visitor. A backend defines `describe`, `binary`, `compare`, `logical`,
    `assign`, `subscript`, `builtin`, `undefined_hint` and `short_circuits`, and may refine `local`,
    `python_value` and `unused`."""

    unsupported_suffix = ""  # added to "... are not supported in @jit functions"
    tuple_bool_index = True  # whether a bool indexes a tuple, as in Python

    def __init__(self, parsed: ParsedFunction, specs: dict[str, ArgSpec], options=None):
        self.parsed = parsed
        self.specs = specs                          # parameter name -> what this compilation takes
        self.options = options                      # the function's jit options
        self.py_names = environment(parsed.fn)      # its globals and closure, read at compile time
        self.scope = Scope()                        # the names it assigns
        self.sym_vars: dict[str, tirx.Var] = {}     # symbolic sizes ("n") -> their TIR variables
        self.ib: IRBuilder | None = None            # the IRBuilder, while building

    def symbolic(self, name: str) -> tirx.Var:
        if name not in self.sym_vars:
            self.sym_vars[name] = tirx.Var(name, "int64")
        return self.sym_vars[name]

    def visit(self, node):
        """Every failure below this node becomes one CompilationError located at the innermost node."""
        try:
            return super().visit(node)
        except CompilationError:
            raise
        except Diagnostic as e:
            # run-time number parameters refused here are specialised instead (raises Specialise)
            e = specialise.check(self, node, e, lambda: self.error(node, str(e)))
            raise self.error(node, str(e)) from (e if debug_enabled() else None)
        except RecursionError:
            raise self.error(node, "expression nested too deeply to compile") from None
        except Exception as e:  # noqa: BLE001 - TVM raises many types; none may reach the user raw
            message = f"could not compile `{ast.unparse(node)}`: the compiler failed on it"
            specialise.check(self, node, e, lambda: self.error(node, message))
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
        if isinstance(node.value, (bool, int, float, str)) or node.value is None or node.value is Ellipsis:
            return node.value  # `...` indexes tensors (`x[..., 0]`)
        raise Diagnostic(f"constants of type {type(node.value).__name__} are not supported")

    def visit_JoinedStr(self, node: ast.JoinedStr):
        # f-strings of compile-time values are compile-time strings (assert messages)
        return "".join(self.visit(part) for part in node.values)

    def visit_FormattedValue(self, node: ast.FormattedValue):
        return self.formatted(self.visit(node.value), node)

    def formatted(self, value, node: ast.FormattedValue) -> str:
        """One `{value!r:spec}` of an f-string, of a compile-time value."""
        if is_symbolic(value):  # a symbolic size shows as its name
            value = format_size(value)
        elif not isinstance(value, (*PY_SCALARS, str, tuple, list, type(None), torch.dtype, torch.finfo, torch.iinfo)):
            raise Diagnostic(f"an f-string in @jit code formats compile-time values only, got {self.describe(value)} "
                             "(a tensor's values are known when the code runs; print them from f.eager(...))")
        value = {-1: value, ord("s"): str(value), ord("r"): repr(value), ord("a"): ascii(value)}[node.conversion]
        spec = self.visit(node.format_spec) if node.format_spec is not None else ""
        try:
            return format(value, spec)
        except (TypeError, ValueError) as e:
            raise Diagnostic(f"f-string: {e}") from None

    def visit_Compare(self, node: ast.Compare):
        # a < b < c means (a < b) and (b < c), with b computed once.
        return semantic.chain(self.visit(node.left),
                              [(op, lambda c=c: self.visit(c)) for op, c in zip(node.ops, node.comparators)],
                              self.compare, lambda lhs, rhs: self.logical(ast.And(), lhs, rhs))

    # ------------------------------------------------------------------------------------------
    # statements and expressions both backends compile alike
    # ------------------------------------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        self.unused(self.visit(node.value))

    def unused(self, value) -> None:
        """The value of an expression statement: dropped (a call has emitted what it does)."""

    def visit_Assign(self, node: ast.Assign):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is None:
            raise Diagnostic("a bare annotation (`x: T` without a value) declares nothing in @jit code")
        self.assign(node.target, self.visit(node.value), node)

    def visit_Tuple(self, node: ast.Tuple):
        return tuple(self.call_arguments(node.elts))  # `(*x.shape[:-1], h, d)` expands as in Python

    visit_List = visit_Tuple

    def visit_BinOp(self, node: ast.BinOp):
        return self.binary(node.op, self.visit(node.left), self.visit(node.right))

    def visit_BoolOp(self, node: ast.BoolOp):
        # Compile-time values short-circuit as in Python; otherwise the backend combines the two
        # sides (`logical`), evaluating the right side at run time only where Python would.
        return semantic.bool_op("and" if isinstance(node.op, ast.And) else "or", self.visit(node.values[0]),
                                [lambda v=v: self.visit(v) for v in node.values[1:]], self.short_circuits,
                                lambda lhs, rhs: self.logical(node.op, lhs, rhs))

    def call_arguments(self, nodes: list[ast.expr]) -> list:
        """A call's positional arguments, `*sizes` expanding a compile-time tuple or list in place
        (`x.view(*x.shape[:-1], h, d)`)."""
        args = []
        for node in nodes:
            if not isinstance(node, ast.Starred):
                args.append(self.visit(node))
                continue
            value = self.visit(node.value)
            if not isinstance(value, (tuple, list)):
                raise self.error(node, f"`*` in a call expands a tuple or list known at compile time, got "
                                       f"{self.describe(value)}")
            args.extend(value)
        return args

    def visit_Slice(self, node: ast.Slice):
        """`a:b:c` in an index: a Python slice of the visited parts (ints, symbolic sizes, None)."""
        return slice(*(None if part is None else self.visit(part) for part in (node.lower, node.upper, node.step)))

    def visit_Subscript(self, node: ast.Subscript):
        value = self.visit(node.value)
        if not isinstance(value, tuple):
            return self.subscript(value, node)
        index = self.visit(node.slice)
        if isinstance(index, slice):  # `x.shape[:-1]`, `x.shape[1:3]`: a tuple
            if not all(v is None or isinstance(v, int) for v in (index.start, index.stop, index.step)):
                raise Diagnostic(f"a tuple slice takes compile-time ints, got {index}")
            if index.step == 0:
                raise Diagnostic("slice step cannot be zero")
            return value[index]
        if not isinstance(index, int) or isinstance(index, bool) and not self.tuple_bool_index:
            raise Diagnostic(f"a tuple index must be a compile-time int, got {self.describe(index)}")
        if not -len(value) <= index < len(value):
            raise Diagnostic(f"index {index} is out of range for a tuple of {len(value)} values")
        return value[index]

    def visit_ListComp(self, node: ast.ListComp):
        """`[f(t) for t in (q, k, v) if ...]` over sequences known when compiling: unrolled, as a tuple of
        the values (torch.compile unrolls them the same way)."""
        return tuple(self.comprehension(node.generators, lambda: self.visit(node.elt)))

    visit_GeneratorExp = visit_ListComp  # `sum(g * g for g in grads)`: the same values

    def comprehension(self, generators: list, element) -> list:
        """The values of `element()` for each binding of the generators' targets (in their own frame)."""
        if not generators:
            return [element()]
        first, rest = generators[0], generators[1:]
        if first.is_async:
            raise Diagnostic("`async for` is not supported in @jit functions")
        values = []
        for item in self.iteration_items(first.iter):
            with self.scope.frame():
                self.assign(first.target, item)
                if all(self.comprehension_test(test) for test in first.ifs):
                    values += self.comprehension(rest, element)
        return values

    def comprehension_test(self, node) -> bool:
        test = self.visit(node)
        if isinstance(test, (bool, int)):
            return bool(test)
        raise Diagnostic(f"a comprehension's `if` must be known when compiling, got {self.describe(test)}")

    def iteration_items(self, node) -> list:
        """What `for ... in node` goes over in a comprehension: a tuple or list, or range/zip/enumerate/
        reversed of compile-time values."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ITERATION \
                and node.func.id not in self.scope and node.func.id not in self.py_names:
            args = self.call_arguments(node.args)
            if node.keywords or node.func.id == "range" and not all(isinstance(a, int) for a in args):
                raise Diagnostic(f"{node.func.id}() in a comprehension takes compile-time values "
                                 "(`range` ints known when compiling)")
            if node.func.id != "range":
                args = [self.sequence(a) for a in args]
            return list(ITERATION[node.func.id](*args))
        return self.sequence(self.visit(node))

    def sequence(self, value) -> list:
        if isinstance(value, (tuple, list)):
            return list(value)
        raise Diagnostic(f"a comprehension goes over a tuple or list known when compiling (or range/zip/"
                         f"enumerate of them), got {self.describe(value)}")

    def visit_Name(self, node: ast.Name):
        """A name: the function's own (innermost frame first), else one of its globals or closure,
        else one the backend adds (`builtin`); anything else is undefined."""
        name = node.id
        if name in self.scope:
            return self.local(name, self.scope.lookup(name))
        if name in self.py_names:
            return self.python_value(name, self.py_names[name])
        value = self.builtin(name)
        if value is not None:
            return value
        known = self.scope.names() | set(self.py_names) | set(PY_BUILTINS)
        raise Diagnostic(f"name '{name}' is not defined{self.undefined_hint(name, known)}")

    def local(self, name: str, value):
        """What reading a name the function assigned gives."""
        return value

    def python_value(self, name: str, value):
        """A name from the function's globals or closure, read once at compile time."""
        return value
