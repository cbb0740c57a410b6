"""Expressions of a kernel: names, constants, operators, subscripts (`x[:, None]`), calls of the
language's builtins (found by identity in builtins.BUILTINS), of methods of block values, and of
`@triton.jit` helpers (inlined). Python numbers and constexprs are computed in Python; a value that
meets a block becomes a block, typed by the language's rules (semantics.py)."""
from __future__ import annotations

import ast
import builtins as py
import inspect
import operator

from ...core.errors import CompilationError, Diagnostic
from ...frontend.source import parse_function
from ..language import core
from . import ops
from .values import Block, reshaped


class Return(Exception):
    """A `return` reached while inlining a helper (or a kernel's own early end)."""

    def __init__(self, value, node):
        super().__init__("return")
        self.value, self.node = value, node


class Method:
    """`block.to`, `block.trans`, ...: a method of a block value, bound, waiting for its call."""

    def __init__(self, block: Block, name: str):
        self.block, self.name = block, name


# Python's own functions a kernel may call on constexprs; min/max of blocks are tl.minimum/maximum (as Triton)
_PYTHON = {py.min: "minimum", py.max: "maximum", py.float: None, py.int: None, py.bool: None, py.abs: None,
           py.len: None, py.print: None, py.isinstance: None, py.getattr: None}


class ExpressionCompiler(ast.NodeVisitor):
    """The expression half of KernelCompiler (codegen.py)."""

    def __init__(self, parsed, env: dict, signature: dict, constants: dict, gpu: bool):
        self.parsed = parsed
        self.env = env
        self.signature = signature
        self.constants = constants
        self.gpu = gpu
        self.scope: dict = {}
        self.carried: dict = {}
        self.pointers: list[str] = []
        self.depth = 0                 # run-time `if`s and loops around the statement being compiled
        self.assigning = None          # the carried buffer of the name being assigned, if it is one
        self._use_counts: dict = {}    # id(function's tree) -> how often each name is read

    def error(self, node, message: str) -> CompilationError:
        return self.parsed.source_map.error(node, message)

    def value(self, node: ast.expr):
        """The value of an expression: a Python value, a Block, or a tuple of them."""
        try:
            return self.visit(node)
        except Diagnostic as e:
            raise self.error(node, str(e)) from None
        except ValueError as e:
            raise self.error(node, str(e)) from None

    def lookup(self, name: str, node: ast.AST):
        if name in self.scope:
            return self.scope[name]
        if name in self.env:
            return core.unwrap(self.env[name])
        if hasattr(py, name):
            return getattr(py, name)
        raise self.error(node, f"name '{name}' is not defined")

    # --- leaves --------------------------------------------------------------------------------------

    def visit_Constant(self, node: ast.Constant):
        return node.value

    def visit_Name(self, node: ast.Name):
        return self.lookup(node.id, node)

    def visit_Tuple(self, node: ast.Tuple):
        return tuple(self.value(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Attribute(self, node: ast.Attribute):
        obj = self.value(node.value)
        if isinstance(obj, Block):
            if node.attr == "dtype":
                return obj.dtype
            if node.attr == "shape":
                return obj.shape
            if node.attr == "T":
                return ops.transpose(obj, ())
            if node.attr in ops.METHODS:
                return Method(obj, node.attr)
            raise self.error(node, f"a block value has no attribute '{node.attr}' in a kernel")
        try:
            return core.unwrap(getattr(obj, node.attr))
        except AttributeError:
            raise self.error(node, f"{_describe(obj)} has no attribute '{node.attr}'") from None

    # --- operators -----------------------------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp):
        return self.binary(node.op, self.value(node.left), self.value(node.right), node)

    def binary(self, op: ast.operator, a, b, node):
        """`a op b`: in Python between constexprs, else a block typed by the language's rules."""
        symbol = ops.SYMBOLS.get(type(op))
        if symbol is None:
            raise self.error(node, f"the operator {type(op).__name__} is not supported in a kernel")
        if not isinstance(a, Block) and not isinstance(b, Block):
            return _python_binary(op, a, b, node, self)
        try:
            return ops.binary(symbol, a, b)
        except Diagnostic as e:
            raise self.error(node, str(e)) from None

    def visit_UnaryOp(self, node: ast.UnaryOp):
        operand = self.value(node.operand)
        if not isinstance(operand, Block):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[type(node.op)](operand)
        return ops.unary(type(node.op), operand)

    def visit_Compare(self, node: ast.Compare):
        if len(node.ops) != 1:
            raise self.error(node, "chained comparisons are not supported in a kernel: write `a < b and b < c`")
        a, b = self.value(node.left), self.value(node.comparators[0])
        op = node.ops[0]
        if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            if isinstance(a, Block) or isinstance(b, Block):
                raise self.error(node, f"`{type(op).__name__}` compares constexprs only")
            return {ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.In: lambda x, y: x in y,
                    ast.NotIn: lambda x, y: x not in y}[type(op)](a, b)
        return self.binary(op, a, b, node)

    def visit_BoolOp(self, node: ast.BoolOp):
        values = [self.value(v) for v in node.values]
        if not any(isinstance(v, Block) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        if any(isinstance(v, Block) and v.shape for v in values):
            raise self.error(node, "`and`/`or` take scalars: combine block masks with `&` and `|`")
        result = values[0]
        for v in values[1:]:
            result = ops.binary("&" if isinstance(node.op, ast.And) else "|", ops.as_bool(result), ops.as_bool(v))
        return result

    def visit_IfExp(self, node: ast.IfExp):
        condition = self.value(node.test)
        if not isinstance(condition, Block):
            return self.value(node.body if condition else node.orelse)
        return ops.where(condition, self.value(node.body), self.value(node.orelse))

    def visit_Subscript(self, node: ast.Subscript):
        obj = self.value(node.value)
        if not isinstance(obj, Block):
            return obj[self.value(node.slice)]
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        axes = []
        for item in items:
            if isinstance(item, ast.Slice) and item.lower is item.upper is item.step is None:
                axes.append("keep")
            elif isinstance(item, ast.Constant) and item.value is None:
                axes.append("new")
            else:
                raise self.error(item, "a block is indexed only with `:` and `None` (x[:, None])")
        kept = axes.count("keep")
        if kept > len(obj.shape):
            raise self.error(node, f"too many `:` for a block of shape {list(obj.shape)}")
        axes += ["keep"] * (len(obj.shape) - kept)
        shape, sizes = [], iter(obj.shape)
        for a in axes:
            shape.append(next(sizes) if a == "keep" else 1)
        positions = [i for i, a in enumerate(axes) if a == "keep"]
        return reshaped(obj, tuple(shape), lambda index: tuple(index[i] for i in positions))

    # --- calls ---------------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call):
        fn = self.value(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.value(a.value))
            else:
                args.append(self.value(a))
        kwargs = {k.arg: self.value(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(fn, Method):
            return self.call_builtin(ops.METHODS[fn.name], node, (fn.block, *args), kwargs)
        if core.is_builtin(fn):
            return self.call_builtin(fn, node, args, kwargs)
        if not _unhashable(fn) and fn in _PYTHON:
            if _PYTHON[fn] and any(isinstance(a, Block) for a in args):
                return self.call_builtin(getattr(core, _PYTHON[fn]), node, args, kwargs)
            if fn is py.print and any(isinstance(a, Block) for a in (*args, *kwargs.values())):
                raise self.error(node, "print() of block values runs in interpret mode (BABYTRITON_INTERPRET=1): "
                                       "the compiler prints only constexprs, while compiling")
            if any(isinstance(a, Block) for a in (*args, *kwargs.values())):
                raise self.error(node, f"{fn.__name__}() takes constexprs in a kernel, not block values")
            return fn(*args, **kwargs)
        helper = getattr(fn, "fn", None)
        if inspect.isfunction(helper):
            return self.inline(fn, helper, node, args, kwargs)
        if isinstance(fn, core.dtype):   # tl.float32(x): a cast, as Triton allows
            return self.call_builtin(core.cast, node, (args[0], fn), {})
        raise self.error(node.func, f"{_describe(fn)} cannot be called in a kernel (only tl builtins, block "
                                    "methods and @triton.jit functions)")

    def call_builtin(self, fn, node, args, kwargs):
        """A call of a builtin of `tl`, bound to its signature (defaults applied) and lowered."""
        from .builtins import BUILTINS  # noqa: PLC0415 - builtins.py lowers through this module's compiler
        lower = BUILTINS.get(fn)
        if lower is None:
            raise self.error(node, f"tl.{fn.__name__} is not supported by the compiler (it runs in interpret "
                                   "mode: BABYTRITON_INTERPRET=1)")
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(node, f"tl.{fn.__name__}(): {e}") from None
        bound.apply_defaults()
        args = [core.unwrap(v) for v in bound.args]
        kwargs = {k: core.unwrap(v) for k, v in bound.kwargs.items()}
        try:
            return lower(self, node, *args, **kwargs)
        except Diagnostic as e:
            raise self.error(node, str(e)) from None
        except ValueError as e:
            raise self.error(node, str(e)) from None

    def inline(self, jit_fn, fn, node, args, kwargs):
        """A @triton.jit helper's body compiled in place with its own names; its `return` is the value."""
        parsed = getattr(jit_fn, "parsed", None) or parse_function(fn)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(node, f"{fn.__name__}(): {e}") from None
        bound.apply_defaults()
        saved = (self.parsed, self.env, self.scope, self.carried, self.depth, self.assigning)
        self.parsed = parsed
        self.env = {**fn.__globals__, **_closure(fn)}
        self.scope = {k: core.unwrap(v) for k, v in bound.arguments.items()}
        self.carried, self.depth, self.assigning = {}, 0, None
        try:
            self.body(parsed.tree.body)
            result = None
        except Return as r:
            result = r.value
        finally:
            self.parsed, self.env, self.scope, self.carried, self.depth, self.assigning = saved
        return result

    # --- conversions ---------------------------------------------------------------------------------

    def as_block(self, value, dtype: core.dtype | None) -> Block:
        """A value as a block: a Python number as a scalar of `dtype` (its own type when None)."""
        if isinstance(value, (Block, bool, int, float)):
            return ops.as_block(value, dtype)
        raise Diagnostic(f"{_describe(value)} is not a value a kernel can compute with")


def _python_binary(op, a, b, node, compiler):
    """An operator between constexprs, computed now (Python's own semantics, as Triton folds them)."""
    try:
        return ops.PYTHON[type(op)](a, b)
    except Exception as e:  # noqa: BLE001 - the user's constant arithmetic failed (1 // 0, str + int)
        raise compiler.error(node, f"{type(e).__name__}: {e}") from None


def _closure(fn) -> dict:
    if not fn.__closure__:
        return {}
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))


def _unhashable(fn) -> bool:
    try:
        hash(fn)
        return False
    except TypeError:
        return True


def _describe(obj) -> str:
    name = getattr(obj, "__name__", None)
    return f"'{name}'" if name else f"a {type(obj).__name__}"

