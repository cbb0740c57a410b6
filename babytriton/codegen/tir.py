"""The TensorIR backend: one ast.NodeVisitor that drives TVM's TIR IRBuilder, with no Relax in between.

A function compiled with `backend="tir"` is loop-level code: it reads tensors element by element
and writes its results into its parameters (destination passing). Values while compiling:
- compile-time Python values (ints, floats, bools, tuples, functions), folded as in Python;
- scalar TIR expressions: loop variables, scalar parameters, sizes, elements read from tensors;
- tensor parameters (`TensorParam`, a TIR buffer);
- runtime locals (`Local`): a Python variable that changes at run time (inside a loop or an `if`, or
  holding an element read from memory) lives in a one-element buffer, since TIR variables are
  immutable. Which variables need one, and their dtypes, is found by compiling the body again until
  nothing changes (see `build`): a variable's dtype is the promotion (torch's rules, Python numbers
  weak) of everything assigned to it, so `acc = 0` then `acc += x[i]` makes a float accumulator.
Python's meaning is kept where TIR differs: `//` and `%` floor, a negative index counts from the end,
the right side of `and`/`or` and the untaken side of `a if c else b` are not evaluated, `break` and
`continue` work (through flags). A variable first assigned inside a loop or a run-time `if` exists
only there.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import functools
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import tvm
from tvm import tirx
from tvm.ir.expr import TensorLoad
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..frontend.arguments import ArgSpec
from ..core.errors import Diagnostic
from ..core.types import DTYPES, TORCH_TO_NAME, format_shape, is_float_dtype
from . import operators
from .base import CodeGenerator
from .scope import Scope
from ..frontend.source import ParsedFunction
from .values import PY_BUILTINS, PY_SCALARS, round_float

INT64 = "int64"
UNBOUNDED = 1 << 62      # const_int_bound reports "no bound" beyond this
MAX_PASSES = 8


def parallel(*args):
    """`for i in bt.parallel(n)` (the arguments of range): the iterations are independent, so they run
    in parallel: GPU threads on a GPU target, CPU threads on a CPU one (TIR backend only). The loop must be
    at the top of the function body or the only statement of another bt.parallel loop. Outside @jit
    it is `range`."""
    return range(*args)


@dataclass
class TensorParam:
    """A tensor parameter: a TIR buffer; its shape entries are ints or symbolic TIR variables."""
    name: str
    buffer: object
    shape: tuple
    dtype: str


@dataclass
class Local:
    """A Python variable that changes at run time: a one-element buffer of a fixed dtype."""
    name: str
    buffer: object
    dtype: str
    line: int
    loop: object = None      # the bt.parallel loop it was created in (None: outside any)


@dataclass
class Loop:
    """A loop being compiled: what `break`/`continue` and the race checks need to know."""
    kind: str                # "range" | "parallel" | "while"
    node: ast.AST
    names: set = field(default_factory=set)         # its loop variable's name
    variables: list = field(default_factory=list)   # a parallel nest's loop variables, outer first
    broke: object = None     # one-element flag buffers: `break` happened / `continue` this iteration
    skipped: object = None


@dataclass(frozen=True)
class Note:
    """What one pass learned about a variable: its dtype (or weak Python kind) and whether it
    needs storage (it is assigned at run time)."""
    kind: str
    runtime: bool


def is_expr(value) -> bool:
    """A scalar TIR expression (a run-time value)."""
    return isinstance(value, tvm.ir.Expr) and isinstance(getattr(value, "ty", None), tvm.ir.PrimType)


def is_python(value) -> bool:
    """A compile-time value (not a run-time expression or a tensor)."""
    return not (is_expr(value) or isinstance(value, TensorParam))


def dtype_of(value) -> str:
    return str(value.ty.dtype)


def kind_of(value) -> str | None:
    if isinstance(value, bool):
        return "py:bool"
    if isinstance(value, int):
        return "py:int"
    if isinstance(value, float):
        return "py:float"
    return dtype_of(value) if is_expr(value) else None


@functools.lru_cache(maxsize=None)
def _sample(kind: str):
    if kind.startswith("py:"):
        return {"py:bool": False, "py:int": 0, "py:float": 0.0}[kind]
    return torch.empty((), dtype=DTYPES[kind])


def join(a: str | None, b: str | None) -> str | None:
    """The kind holding both: torch's promotion, Python numbers being weak."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if a.startswith("py:") and b.startswith("py:"):
        order = ["py:bool", "py:int", "py:float"]
        return max(a, b, key=order.index)
    return TORCH_TO_NAME[torch.result_type(_sample(a), _sample(b))]


def storage_dtype(kind: str) -> str:
    return {"py:bool": "bool", "py:int": INT64, "py:float": "float32"}.get(kind, kind)


def describe(value) -> str:
    if isinstance(value, TensorParam):
        return f"the tensor '{value.name}' ({value.dtype}, shape {format_shape(value.shape)})"
    if is_expr(value):
        return f"a run-time {dtype_of(value)} value"
    return f"{type(value).__name__} {value!r}"


def loads_memory(expr) -> bool:
    """Whether an expression reads a buffer (so its value depends on when it is evaluated)."""
    if isinstance(expr, TensorLoad):
        return True
    for name in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(expr, name, None)
        if isinstance(child, tvm.ir.Expr) and loads_memory(child):
            return True
    return any(loads_memory(arg) for arg in getattr(expr, "args", ()) if isinstance(arg, tvm.ir.Expr))


def uses_any(expr, variables) -> bool:
    if any(expr.same_as(v) for v in variables):
        return True
    if isinstance(expr, TensorLoad):
        return any(uses_any(i, variables) for i in expr.indices)
    for name in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(expr, name, None)
        if isinstance(child, tvm.ir.Expr) and uses_any(child, variables):
            return True
    return any(uses_any(arg, variables) for arg in getattr(expr, "args", ()) if isinstance(arg, tvm.ir.Expr))


def leaves(nodes, kinds) -> bool:
    """Whether statements hold a `break`/`continue` (of `kinds`) of the loop they are in."""
    for node in nodes:
        if isinstance(node, kinds):
            return True
        if not isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda, ast.expr)) and \
                leaves(ast.iter_child_nodes(node), kinds):
            return True
    return False


class TIRCodeGen(CodeGenerator):
    """Compiles one parsed Python function into a TIR PrimFunc (`build()`); `outputs` are the names
    of the parameters it writes."""

    unsupported_suffix = " (backend='tir')"
    tuple_bool_index = False   # as for tensors' indices
    describe = staticmethod(describe)

    def __init__(self, parsed: ParsedFunction, specs: dict[str, ArgSpec], options=None):
        super().__init__(parsed, specs, options)
        self.assumed: dict[str, Note] = {}   # what the previous pass learned about each variable
        self.outputs: list[str] = []
        # What one pass over the body builds and learns (each pass starts afresh: `_build_once`).
        self.seen: dict[str, Note] = {}      # what this pass learns about each variable
        self.written: set[str] = set()       # the tensor parameters it writes
        self.loops: list[Loop] = []          # the loops being compiled, outermost first
        self.runtime_depth = 0               # enclosing run-time loops and ifs
        self.gone: dict[str, str] = {}       # names whose loop or branch has ended -> where they lived
        self.analyzer = tvm.sym.Analyzer()   # bounds of loop variables, for index checks
        self.unreachable = 0                 # inside a loop that never runs: no bounds checks

    # ------------------------------------------------------------------------------------------
    # driver and the one error path
    # ------------------------------------------------------------------------------------------
    def build(self) -> tvm.IRModule:
        """Compile until the variables' storage and dtypes stop changing (a variable's dtype is the
        promotion of everything assigned to it, which later statements can widen)."""
        for _ in range(MAX_PASSES):
            func = self._build_once()
            learned = dict(self.assumed)   # only ever widened, so the passes settle
            for name, note in self.seen.items():
                old = learned.get(name)
                learned[name] = note if old is None else Note(join(old.kind, note.kind), old.runtime or note.runtime)
            if learned == self.assumed:
                self.outputs = [p for p in self.specs if p in self.written]
                return tvm.IRModule({self.parsed.name: func})
            self.assumed = learned
        raise self.error(self.parsed.tree, "could not settle the types of the function's variables")

    def _build_once(self):
        """One pass over the body, from a fresh state."""
        self.scope, self.sym_vars = Scope(), {}
        self.seen, self.written, self.loops, self.gone = {}, set(), [], {}
        self.runtime_depth = self.unreachable = 0
        self.analyzer = tvm.sym.Analyzer()
        with IRBuilder() as ib:
            self.ib = ib
            self.visit(self.parsed.tree)
        return ib.get()

    # ------------------------------------------------------------------------------------------
    # helpers: values and dtypes
    # ------------------------------------------------------------------------------------------
    def scalar(self, value):
        """Check that a value can take part in arithmetic (a number or a run-time scalar)."""
        if is_expr(value) or isinstance(value, PY_SCALARS):
            return value
        if isinstance(value, TensorParam):
            raise Diagnostic(f"{describe(value)} is a whole tensor; the TIR backend works element by element: "
                             f"index it, e.g. {value.name}[{', '.join('ijk'[:len(value.shape)] or '()')}]")
        raise Diagnostic(f"expected a number, got {describe(value)}")

    def promote(self, lhs, rhs) -> str:
        ka, kb = kind_of(lhs), kind_of(rhs)
        if ka == kb and not ka.startswith("py:"):
            return ka
        return storage_dtype(join(ka, kb))

    def cast(self, value, dtype: str):
        """A number or expression as a TIR expression of `dtype` (conversions as in torch)."""
        if isinstance(value, PY_SCALARS):
            if dtype == "bool":
                return tirx.const(bool(value), "bool")
            # a float beyond the dtype's range is ±inf, as torch converts it (TVM refuses the literal)
            return tirx.const(int(value) if not is_float_dtype(dtype) else round_float(value, dtype), dtype)
        if dtype_of(value) == dtype:
            return value
        if dtype == "bool":
            return tirx.NE(value, tirx.const(0, dtype_of(value)))
        return tirx.Cast(dtype, value)

    def condition(self, value):
        """A value used as a condition: a Python bool, or a run-time bool expression."""
        if isinstance(value, PY_SCALARS):
            return bool(value)
        self.scalar(value)
        return value if dtype_of(value) == "bool" else self.cast(value, "bool")

    # ------------------------------------------------------------------------------------------
    # helpers: variables
    # ------------------------------------------------------------------------------------------
    def note(self, name: str, value, runtime: bool):
        old = self.seen.get(name)
        kind = join(old.kind if old else None, kind_of(value))
        self.seen[name] = Note(kind, runtime or bool(old and old.runtime))

    def assign_name(self, name: str, value, node: ast.AST):
        """`name = value` with Python's meaning: locals changing at run time get storage."""
        existing = self.scope.lookup(name) if name in self.scope else None
        if isinstance(existing, TensorParam):
            raise Diagnostic(f"'{name}' is a tensor parameter; it cannot be re-assigned (write into it with "
                             f"{name}[...] = ...)")
        if any(name in loop.names for loop in self.loops):
            raise Diagnostic(f"cannot assign to the loop variable '{name}' inside its loop")
        if kind_of(value) is None:
            if isinstance(value, TensorParam):
                raise Diagnostic(f"'{name} = {value.name}' would make another name for a tensor; "
                                 f"use '{value.name}' itself")
            if self.runtime_depth or isinstance(existing, Local):
                raise Diagnostic(f"'{name}' would hold {describe(value)} at run time; only numbers can")
            self.scope.assign(name, value)
            return
        runtime = self.runtime_depth > 0 or (is_expr(value) and loads_memory(value))
        self.note(name, value, runtime)
        assumed = self.assumed.get(name)
        if isinstance(existing, Local):
            self.store_local(existing, value)
        elif assumed is not None and assumed.runtime or runtime:
            local = self.new_local(name, storage_dtype(join(assumed.kind if assumed else None, kind_of(value))),
                                   node)
            self.store_local(local, value)
            self.scope.assign(name, local)
        else:
            self.scope.assign(name, value)   # fixed from here on: Python value or pure expression

    def new_local(self, name: str, dtype: str, node: ast.AST) -> Local:
        # At the top of the function body a local may be shared by several GPU kernels: global memory.
        scope = "local" if self.runtime_depth else "global"
        buffer = IRBuilder.name(name, T.alloc_buffer((1,), dtype, scope=scope))
        parallel_loop = next((loop for loop in self.loops if loop.kind == "parallel"), None)
        return Local(name, buffer, dtype, node.lineno, parallel_loop)

    def store_local(self, local: Local, value):
        loop = next((loop for loop in self.loops if loop.kind == "parallel"), None)
        if loop is not None and local.loop is not loop:
            raise Diagnostic(f"'{local.name}' (assigned first on line {self.line(local.line)}, before the "
                             "bt.parallel loop) would be written by every iteration at once; assign it inside "
                             "the loop, or loop with range()")
        T.buffer_store(local.buffer, self.cast(value, local.dtype), [tirx.const(0, INT64)])

    def line(self, relative: int) -> int:
        return self.parsed.source_map.file_line(relative)

    @contextmanager
    def runtime_block(self, where: str):
        """The body of a run-time loop or branch: names first assigned here end with it."""
        self.runtime_depth += 1
        try:
            with self.scope.frame() as frame:
                yield
                for name in frame:
                    if not any(name in outer for outer in self.scope.frames[:-1]):
                        self.gone[name] = where
        finally:
            self.runtime_depth -= 1

    # ------------------------------------------------------------------------------------------
    # statements
    # ------------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef):
        with T.prim_func():
            T.func_name(node.name)
            with self.scope.frame():
                for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    self.declare_param(arg)
                self.visit_body(node.body, top=True)

    def declare_param(self, arg: ast.arg):
        spec = self.specs[arg.arg]
        if spec.kind in ("constexpr", "scalar"):
            value = spec.value if spec.kind == "constexpr" else T.arg(arg.arg, tirx.Var(arg.arg, spec.dtype))
            note = self.assumed.get(arg.arg)
            if note is not None and note.runtime:   # the body changes it at run time: a local copy
                self.assign_name(arg.arg, value, arg)
            else:
                self.scope.assign(arg.arg, value)
        else:
            shape = tuple(self.symbolic(d) if isinstance(d, str) else d for d in spec.shape)
            dims = [d if isinstance(d, tirx.Var) else tirx.IntImm(INT64, d) for d in shape]
            handle = T.arg(f"{arg.arg}_handle", T.handle())
            buffer = IRBuilder.name(arg.arg, T.match_buffer(handle, dims, spec.dtype))
            self.scope.assign(arg.arg, TensorParam(arg.arg, buffer, shape, spec.dtype))

    def visit_body(self, body: list[ast.stmt], top: bool = False):
        for position, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if stmt.value is not None:
                    raise self.error(stmt, "a backend='tir' function writes its results into its parameters "
                                           "(destination passing); it cannot return a value")
                if not (top and position == len(body) - 1):
                    raise self.error(stmt, "`return` is only allowed as the last statement of the function "
                                           "(backend='tir')")
                continue
            self.visit(stmt)
            if isinstance(stmt, (ast.Break, ast.Continue)):
                return  # what follows never runs
            loop = self.loops[-1] if self.loops else None
            rest = body[position + 1:]
            if rest and loop is not None and leaves([stmt], (ast.Break, ast.Continue)):
                with T.If(self.still_running(loop)):   # the rest of the body, unless it was left
                    with T.Then():
                        self.visit_body(rest)
                return

    def unused(self, value) -> None:
        if value is not None:
            raise Diagnostic("this expression's value is not used; assign it or write it into a tensor")

    def assign(self, target: ast.expr, value, node: ast.AST):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, node)
        elif isinstance(target, ast.Subscript):
            self.store(target, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error(target, f"cannot unpack {describe(value)} into {len(target.elts)} names")
            # Read every value before writing any: `a, b = b, a` swaps.
            fixed = [T.Bind(v) if is_expr(v) and loads_memory(v) else v for v in value]
            for sub, item in zip(target.elts, fixed):
                self.assign(sub, item, node)
        else:
            raise self.error(target, f"cannot assign to {ast.unparse(target)}")

    def store(self, target: ast.Subscript, value):
        tensor = self.visit(target.value)
        if not isinstance(tensor, TensorParam):
            raise self.error(target, f"only tensor parameters can be written element by element, not "
                                     f"{describe(tensor)}")
        indices = self.indices(tensor, target)
        value = self.scalar(value)
        parallel_loop = next((loop for loop in self.loops if loop.kind == "parallel"), None)
        if parallel_loop is not None and not any(uses_any(i, parallel_loop.variables) for i in indices
                                                 if is_expr(i)):
            raise self.error(target, f"every iteration of the bt.parallel loop writes this same element of "
                                     f"'{tensor.name}' (a race); index it with the loop variable, or loop "
                                     "with range()")
        self.written.add(tensor.name)
        T.buffer_store(tensor.buffer, self.cast(value, tensor.dtype), indices)

    def visit_For(self, node: ast.For):
        if node.orelse:
            raise Diagnostic("`for ... else` is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a for loop needs a single loop variable name here")
        if not isinstance(node.iter, ast.Call):
            raise self.error(node.iter, "for loops iterate over range(...) or bt.parallel(...)")
        func = self.visit(node.iter.func)
        if func is not range and func is not parallel:
            raise self.error(node.iter, "for loops iterate over range(...) or bt.parallel(...)")
        if node.iter.keywords:
            raise self.error(node.iter, f"{ast.unparse(node.iter.func)}() takes no keyword arguments")
        bounds = [self.visit(a) for a in node.iter.args]
        start, stop, step = self.range_bounds(bounds, node.iter)
        if func is parallel:
            self.check_parallel_placement(node)
            if any(is_expr(b) and loads_memory(b) for b in (start, stop)):
                raise self.error(node.iter, "the range of a bt.parallel loop must come from sizes, scalar "
                                            "parameters and constants (it sets the number of threads)")
        name = node.target.id
        if name in self.scope:
            raise self.error(node.target, f"the loop variable '{name}' is already a name in this function; "
                                          "pick another")
        trips = (stop - start) if step == 1 else self.trip_count(start, stop, step)
        empty = isinstance(trips, int) and trips <= 0
        loop = Loop("parallel" if func is parallel else "range", node, {name})
        outer = self.loops[-1] if self.loops and self.loops[-1].kind == "parallel" and func is parallel else None
        frame = (T.parallel if func is parallel else T.serial)
        first, last = (start, stop) if step == 1 else (0, trips)
        if leaves(node.body, ast.Break) and func is not parallel:
            loop.broke = self.flag("broke")
        with frame(self.index_expr(first), self.index_expr(last)) as var:
            IRBuilder.name(name if step == 1 else f"{name}_step", var)
            if not empty:
                self.analyzer.bind(var, tvm.ir.Range(self.index_expr(first), self.index_expr(last)))
            value = var if step == 1 else self.index_expr(start) + var * tirx.IntImm(INT64, step)
            loop.variables = (outer.variables if outer is not None else []) + [var]
            self.loops.append(loop)
            self.unreachable += empty
            try:
                with self.runtime_block(f"the loop on line {self.line(node.lineno)}"), self.loop_body(loop):
                    self.scope.assign(name, value)
                    self.visit_body(node.body)
                self.gone[name] = f"the loop on line {self.line(node.lineno)} (it is its loop variable)"
            finally:
                self.loops.pop()
                self.unreachable -= empty

    def range_bounds(self, bounds: list, node):
        if not 1 <= len(bounds) <= 3:
            raise self.error(node, f"range() takes 1 to 3 arguments, got {len(bounds)}")
        for b in bounds:
            if isinstance(b, bool) or not (isinstance(b, int) or is_expr(b) and "int" in dtype_of(b)):
                raise self.error(node, f"range() takes integers, got {describe(b)}")
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if not isinstance(step, int):
            raise self.error(node, "the step of a loop must be a compile-time int")
        if step == 0:
            raise self.error(node, "range() step must not be zero")
        return start, stop, step

    def trip_count(self, start, stop, step):
        if isinstance(start, int) and isinstance(stop, int):
            return len(range(start, stop, step))
        span = self.index_expr(stop - start if step > 0 else start - stop)
        return tirx.max(tirx.floordiv(span + (abs(step) - 1), abs(step)), tirx.const(0, INT64))

    def index_expr(self, value):
        return tirx.IntImm(INT64, value) if isinstance(value, int) else self.cast(value, INT64)

    def check_parallel_placement(self, node: ast.For):
        if not self.loops and self.runtime_depth == 0:
            return
        outer = self.loops[-1] if self.loops else None
        if outer is not None and outer.kind == "parallel" and outer.node.body == [node] \
                and self.runtime_depth == len(self.loops):
            return
        raise self.error(node.iter, "a bt.parallel loop must be at the top of the function body, or the only "
                                    "statement of another bt.parallel loop (each becomes a parallel kernel)")

    def visit_While(self, node: ast.While):
        if node.orelse:
            raise Diagnostic("`while ... else` is not supported")
        cond = self.condition(self.visit(node.test))
        if cond is False:
            return
        loop = Loop("while", node)
        if leaves(node.body, ast.Break):
            loop.broke = self.flag("broke")
            cond = tirx.if_then_else(loop.broke[tirx.const(0, INT64)], tirx.const(False, "bool"),
                                     self.cast(cond, "bool"))
        self.loops.append(loop)
        try:
            with T.While(cond):
                with self.runtime_block(f"the loop on line {self.line(node.lineno)}"), self.loop_body(loop):
                    self.visit_body(node.body)
        finally:
            self.loops.pop()

    def visit_If(self, node: ast.If):
        cond = self.condition(self.visit(node.test))
        if isinstance(cond, bool):  # known now: only that branch is compiled, as a Python `if`
            for stmt in node.body if cond else node.orelse:
                self.visit(stmt)
            return
        where = f"the `if` on line {self.line(node.lineno)}"
        with T.If(cond):
            with T.Then():
                with self.analyzer.constraint_scope(cond), self.runtime_block(where):
                    self.visit_body(node.body)
            if node.orelse:
                with T.Else():
                    with self.analyzer.constraint_scope(tirx.Not(cond)), self.runtime_block(where):
                        self.visit_body(node.orelse)

    # `break` and `continue` set a flag that guards the rest of the loop (TVM cannot compile
    # them for CPUs): a broken `while` stops at its next test, a broken `for` runs empty iterations.
    def visit_Break(self, node):
        loop = self.innermost_loop("break")
        if loop.kind == "parallel":
            raise Diagnostic("`break` cannot leave a bt.parallel loop: its iterations run at once")
        T.buffer_store(loop.broke, tirx.const(True, "bool"), [tirx.const(0, INT64)])

    def visit_Continue(self, node):
        loop = self.innermost_loop("continue")
        T.buffer_store(loop.skipped, tirx.const(True, "bool"), [tirx.const(0, INT64)])

    def innermost_loop(self, word: str) -> Loop:
        if not self.loops:
            raise Diagnostic(f"`{word}` outside a loop")
        return self.loops[-1]

    def flag(self, name: str):
        buffer = IRBuilder.name(name, T.alloc_buffer((1,), "bool", scope="local" if self.runtime_depth else "global"))
        T.buffer_store(buffer, tirx.const(False, "bool"), [tirx.const(0, INT64)])
        return buffer

    def still_running(self, loop: Loop):
        flags = [f[tirx.const(0, INT64)] for f in (loop.broke, loop.skipped) if f is not None]
        return tirx.Not(flags[0] if len(flags) == 1 else tirx.Or(*flags))

    @contextmanager
    def loop_body(self, loop: Loop):
        """Inside the loop: reset the `continue` flag, and skip iterations after a `break`."""
        if leaves(loop.node.body, ast.Continue):
            loop.skipped = self.flag("skipped")
        if loop.broke is not None and loop.kind == "range":
            with T.If(tirx.Not(loop.broke[tirx.const(0, INT64)])):
                with T.Then():
                    yield
        else:
            yield

    # ------------------------------------------------------------------------------------------
    # expressions
    # ------------------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name):
        name = node.id
        if name in self.gone and name not in self.scope:
            raise Diagnostic(f"'{name}' only exists inside {self.gone[name]}: assign it before that to use it "
                             "after")
        return super().visit_Name(node)

    def local(self, name: str, value):
        return value.buffer[tirx.const(0, INT64)] if isinstance(value, Local) else value

    def builtin(self, name: str):
        return getattr(builtins, name, None)

    def undefined_hint(self, name: str, known: set) -> str:
        hint = difflib.get_close_matches(name, known, n=1)
        return f"; did you mean '{hint[0]}'?" if hint else ""

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        if isinstance(value, TensorParam):
            attrs = {"shape": value.shape, "dtype": value.dtype, "ndim": len(value.shape)}
            if node.attr not in attrs:
                raise Diagnostic(f"tensors have no attribute '{node.attr}' here (available: shape, dtype, ndim)")
            return attrs[node.attr]
        if is_expr(value):
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'")
        try:
            return getattr(value, node.attr)
        except AttributeError:
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'") from None

    def subscript(self, value, node: ast.Subscript):
        if isinstance(value, TensorParam):
            return tirx.BufferLoad(value.buffer, self.indices(value, node))
        raise Diagnostic(f"{describe(value)} cannot be indexed")

    def indices(self, tensor: TensorParam, node: ast.Subscript) -> list:
        """The element's indices: one integer per dimension, negative ones counting from the end
        as in Python; an index provably outside a static size is an error here."""
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(p, ast.Slice) for p in parts):
            raise Diagnostic("the TIR backend reads and writes single elements: index every dimension with an "
                             "integer (slices are not supported)")
        if len(parts) != len(tensor.shape):
            raise Diagnostic(f"'{tensor.name}' has {len(tensor.shape)} dimension(s); index each of them "
                             f"(got {len(parts)} index(es))")
        return [self.index(tensor, axis, part) for axis, part in enumerate(parts)]

    def index(self, tensor: TensorParam, axis: int, part: ast.expr):
        value = self.visit(part)
        size = tensor.shape[axis]
        where = f"dimension {axis} of '{tensor.name}' (size {size})"
        if isinstance(value, bool) or not (isinstance(value, int) or is_expr(value) and "int" in dtype_of(value)):
            raise self.error(part, f"an index must be an integer, got {describe(value)}")
        if isinstance(value, int):
            if isinstance(size, int) and not -size <= value < size:
                raise self.error(part, f"index {value} is out of bounds for {where}")
            return tirx.IntImm(INT64, value) if value >= 0 else self.index_expr(size) + value
        value = self.cast(value, INT64)
        if isinstance(size, int) and not self.unreachable:
            bound = self.analyzer.const_int_bound(value)
            if -UNBOUNDED < bound.min_value and bound.max_value < UNBOUNDED and (
                    bound.max_value >= size or bound.min_value < -size):
                reach = bound.max_value if bound.max_value >= size else bound.min_value
                raise self.error(part, f"index `{ast.unparse(part)}` reaches {reach}, out of bounds for {where}")
        if self.analyzer.can_prove(value >= 0):
            return value
        return tirx.if_then_else(value < 0, value + self.index_expr(size), value)  # Python's a[-1]

    def binary(self, op: ast.operator, lhs, rhs):
        kind = type(op)
        sym = operators.SYMBOL[kind]
        if is_python(lhs) and is_python(rhs):
            try:
                return operators.PY_BINARY[kind](lhs, rhs)
            except (ZeroDivisionError, TypeError) as e:
                raise Diagnostic(f"cannot compute `{sym}` at compile time: {e}") from None
        lhs, rhs = self.scalar(lhs), self.scalar(rhs)
        dtype = self.promote(lhs, rhs)
        if kind in operators.TIR_BITWISE or kind in operators.TIR_SHIFT:
            if is_float_dtype(dtype) or (kind in operators.TIR_SHIFT and dtype == "bool"):
                raise Diagnostic(f"`{sym}` needs integer operands, got {describe(lhs)} and {describe(rhs)}")
            if kind in operators.TIR_SHIFT:
                return operators.TIR_SHIFT[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))
            int_op, bool_op = operators.TIR_BITWISE[kind]
            return (bool_op if dtype == "bool" else int_op)(self.cast(lhs, dtype), self.cast(rhs, dtype))
        if kind is ast.MatMult:
            raise Diagnostic("`@` multiplies whole tensors; the TIR backend works element by element "
                             "(write the loops, or use the Relax backend)")
        if dtype == "bool":
            raise Diagnostic(f"`{sym}` on bools is not supported; use `|`, `&`, `^` or convert with int()")
        if kind in (ast.FloorDiv, ast.Mod) and isinstance(rhs, PY_SCALARS) and rhs == 0:
            raise Diagnostic(f"`{sym}` by zero")
        if kind is ast.Div and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]   # true division, as in Python and torch
        if kind is ast.Pow and not is_float_dtype(dtype):
            if not (isinstance(rhs, int) and rhs >= 0):
                raise Diagnostic("an integer power needs a compile-time exponent >= 0 (or float operands)")
            result = tirx.const(1, dtype)
            for _ in range(rhs):
                result = result * self.cast(lhs, dtype)
            return result
        table = operators.TIR_FLOAT_ARITH if is_float_dtype(dtype) else operators.TIR_INT_ARITH
        return table[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))

    def visit_UnaryOp(self, node: ast.UnaryOp):
        value = self.visit(node.operand)
        kind = type(node.op)
        if isinstance(value, PY_SCALARS):
            return operators.PY_UNARY[kind](value)
        value = self.scalar(value)
        dtype = dtype_of(value)
        if kind is ast.Not:
            return _negate(self.condition(value))
        if kind is ast.UAdd:
            return value
        if kind is ast.USub:
            if dtype == "bool":
                raise Diagnostic("`-` on a bool is not supported; use `not`")
            return tirx.const(0, dtype) - value
        if is_float_dtype(dtype):
            raise Diagnostic(f"`~` needs a bool or integer, got {describe(value)}")
        return _negate(value) if dtype == "bool" else tirx.bitwise_not(value)

    def compare(self, op: ast.cmpop, lhs, rhs):
        kind = type(op)
        if kind not in operators.TIR_COMPARE:
            raise Diagnostic("the comparisons `is`, `in` and their negations are not supported")
        if is_python(lhs) and is_python(rhs):
            return operators.PY_COMPARE[kind](lhs, rhs)
        lhs, rhs = self.scalar(lhs), self.scalar(rhs)
        dtype = self.promote(lhs, rhs)
        return operators.TIR_COMPARE[kind](self.cast(lhs, dtype), self.cast(rhs, dtype))

    def short_circuits(self, value) -> bool:
        return isinstance(value, PY_SCALARS)

    def logical(self, op: ast.boolop, lhs, rhs):
        if isinstance(lhs, PY_SCALARS) and isinstance(rhs, PY_SCALARS):
            return (lhs and rhs) if isinstance(op, ast.And) else (lhs or rhs)
        for v in (lhs, rhs):
            if not (isinstance(v, bool) or is_expr(v) and dtype_of(v) == "bool"):
                raise Diagnostic(f"`{operators.SYMBOL[type(op)]}` needs bools, got {describe(v)}; compare first, "
                                 "e.g. `(x > 0) and (y > 0)`")
        lhs, rhs = self.cast(lhs, "bool"), self.cast(rhs, "bool")
        # The right side is evaluated at run time only when needed (it may read memory the left side guards).
        if not loads_memory(rhs):
            return tirx.And(lhs, rhs) if isinstance(op, ast.And) else tirx.Or(lhs, rhs)
        if isinstance(op, ast.And):
            return tirx.if_then_else(lhs, rhs, tirx.const(False, "bool"))
        return tirx.if_then_else(lhs, tirx.const(True, "bool"), rhs)

    def visit_IfExp(self, node: ast.IfExp):
        cond = self.condition(self.visit(node.test))
        if isinstance(cond, bool):
            return self.visit(node.body) if cond else self.visit(node.orelse)
        a, b = self.scalar(self.visit(node.body)), self.scalar(self.visit(node.orelse))
        dtype = self.promote(a, b)
        return tirx.if_then_else(cond, self.cast(a, dtype), self.cast(b, dtype))   # only one side is evaluated

    def visit_Call(self, node: ast.Call):
        func = self.visit(node.func)
        args = [self.visit(a) for a in node.args]
        if node.keywords:
            raise Diagnostic(f"`{ast.unparse(node.func)}` takes no keyword arguments in @jit code")
        if func is range or func is parallel:
            raise Diagnostic(f"{ast.unparse(node.func)}() only appears as the iterable of a for loop")
        if func is len:
            if len(args) != 1:
                raise Diagnostic("len() takes exactly one argument")
            (value,) = args
            return value.shape[0] if isinstance(value, TensorParam) else len(value)
        if all(isinstance(a, PY_SCALARS) for a in args) and (
                func in PY_BUILTINS.values() or getattr(func, "__module__", None) == "math"):
            return func(*args)   # compile-time arithmetic
        if func in (min, max):
            return self.min_max(func, args)
        if func in (int, float, bool):
            if len(args) != 1:
                raise Diagnostic(f"{func.__name__}() takes one argument")
            dtype = {int: INT64, float: TORCH_TO_NAME[torch.get_default_dtype()], bool: "bool"}[func]
            return self.cast(self.scalar(args[0]), dtype)
        try:
            intrinsic, rule = operators.TIR_MATH[func]
        except (KeyError, TypeError):
            raise Diagnostic(f"cannot call `{ast.unparse(node.func)}` ({describe(func)}) from a "
                             "backend='tir' function") from None
        return self.math(intrinsic, rule, [self.scalar(a) for a in args], ast.unparse(node.func))

    def min_max(self, func, args):
        if len(args) < 2:
            raise Diagnostic(f"{func.__name__}() of run-time values takes two or more numbers")
        result = self.scalar(args[0])
        for arg in args[1:]:
            dtype = self.promote(result, self.scalar(arg))
            result = (tirx.min if func is min else tirx.max)(self.cast(result, dtype), self.cast(arg, dtype))
        return result

    def math(self, intrinsic, rule: str, args: list, name: str):
        dtype = kind_of(args[0])
        for arg in args[1:]:
            dtype = join(dtype, kind_of(arg))
        dtype = storage_dtype(dtype)
        if rule in ("float", "int") and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]
        try:
            result = intrinsic(*[self.cast(a, dtype) for a in args])
        except TypeError:
            raise Diagnostic(f"{name}() got {len(args)} argument(s)") from None
        return self.cast(result, INT64) if rule == "int" else result


def _negate(condition):
    """`not c` as `c ^ True`, not Not(c): TVM's simplifier turns !(a >= b) into a < b, false where a
    or b is NaN (the same rule as legalize._logical_not)."""
    return tirx.bitwise_xor(condition, tirx.const(True, "bool"))
