"""A Triton kernel's AST to the block program: one TIR PrimFunc whose body is a loop over the grid's
programs, each program's block operations a loop nest (emit.py). Constexprs and Python numbers are
folded while compiling: an `if` on one picks its branch, `static_range` unrolls, `@triton.jit`
helpers are inlined. Statements here; expressions and calls in expressions.py."""
from __future__ import annotations

import ast
import collections

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...core.errors import Diagnostic
from .. import semantics
from ..language import core
from . import emit
from .emit import reading
from .expressions import ExpressionCompiler, Return
from .values import Block, cast, scalar


class KernelCompiler(ExpressionCompiler):
    """Compiles one kernel; `build()` gives the block program."""

    def build(self) -> tirx.PrimFunc:
        """The block program: parameters, the grid's three program loops, the kernel's body in them."""
        tree = self.parsed.tree
        with IRBuilder() as ib:
            self.ib = ib
            self.emit = emit.Emitter(ib, self.gpu)
            with T.prim_func():
                T.func_name(tree.name)
                T.func_attr({"tir.noalias": True, "global_symbol": tree.name})
                self._parameters(tree)
                grid = [T.arg(f"grid{axis}", tirx.Var(f"grid{axis}", "int32")) for axis in range(3)]
                self.grid = grid
                with T.serial(0, grid[2], annotations={emit.PROGRAM: 2}) as p2, \
                        T.serial(0, grid[1], annotations={emit.PROGRAM: 1}) as p1, \
                        T.serial(0, grid[0], annotations={emit.PROGRAM: 0}) as p0:
                    self.pids = [ib.name("pid0", p0), ib.name("pid1", p1), ib.name("pid2", p2)]
                    try:
                        self.body(tree.body)
                    except Return as r:   # the kernel's own `return` (its value, if any, is dropped as Triton does)
                        if r.value is not None:
                            raise self.error(r.node, "a kernel returns nothing: write results with tl.store") from None
        func = ib.get()
        return func.with_attr(emit.ATOMIC, True) if self.emit.atomics else func

    def _parameters(self, tree: ast.FunctionDef) -> None:
        """Each pointer a flat buffer over the tensor (from its first element), each scalar a TIR var;
        constexprs are Python values."""
        args = tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise self.parsed.source_map.error(tree, "a kernel takes plain positional parameters")
        for arg in args.args:
            name = arg.arg
            if name in self.constants:
                self.scope[name] = core.unwrap(self.constants[name])
                continue
            kind = self.signature[name]
            if isinstance(kind, core.pointer_type):
                handle = T.arg(name, T.handle())
                extent = tirx.Var(f"{name}_extent", "int64")
                # on a GPU no element offset (torch's tensors come with their first element's address, a
                # zero offset): TVM then sees a 16-byte vector access aligned where its index is (gpu.py)
                buf = self.ib.name(name, T.match_buffer(handle, (extent,), kind.element_ty.tvm,
                                                        offset_factor=0 if self.gpu else 1,
                                                        align=max(kind.element_ty.primitive_bitwidth // 8, 1)))
                self.scope[name] = Block(kind, (), lambda index: tirx.IntImm("int64", 0), buf)
                self.pointers.append(name)
            else:
                var = T.arg(name, tirx.Var(name, kind.tvm))
                self.scope[name] = scalar(kind, var)

    # --- statements ------------------------------------------------------------------------------

    def body(self, statements: list[ast.stmt]) -> None:
        for stmt in statements:
            self.visit(stmt)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):   # a docstring
            return
        self.value(node.value)

    def visit_Pass(self, node) -> None:
        pass

    def visit_Assign(self, node: ast.Assign) -> None:
        # `acc = tl.dot(a, b, acc)` with acc carried by a loop: the product accumulates in acc's buffer
        target = node.targets[0]
        self.assigning = self.carried.get(target.id) if isinstance(target, ast.Name) else None
        try:
            value = self.value(node.value)
        finally:
            self.assigning = None
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.value(node.value))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "only a name can be updated with an augmented assignment")
        current = self.lookup(node.target.id, node.target)
        self.assign(node.target, self.binary(node.op, current, self.value(node.value), node))

    def assign(self, target: ast.expr, value) -> None:
        """Bind a name (or unpack a tuple into names); a loop-carried name's buffer is written."""
        if isinstance(target, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error(target, "cannot unpack this value into these names")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
            return
        if not isinstance(target, ast.Name):
            raise self.error(target, "a kernel assigns only to names (memory is written with tl.store)")
        name = target.id
        carried = self.carried.get(name)
        if carried is not None:
            self.update_carried(name, carried, value, target)
            return
        if isinstance(value, Block) and self.carried and self.reads_carried(value):
            value = self.emit.materialise(value, name)   # later updates of what it reads must not change it
        elif isinstance(value, Block) and value.buffer is None and value.shape and self.uses(name) > 1 and \
                _calls_math(value):
            value = self.emit.materialise(value, name)   # computed once (an exp read by a sum and a store)
        self.scope[name] = value

    def uses(self, name: str) -> int:
        """How many times the function being compiled reads `name`."""
        tree = self.parsed.tree
        counts = self._use_counts.get(id(tree))
        if counts is None:
            counts = self._use_counts[id(tree)] = collections.Counter(
                n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        return counts[name]

    def update_carried(self, name: str, buf, value, node) -> None:
        """A new value of a name that lives in a buffer (a loop's carried value)."""
        old = self.scope[name]
        block = self.as_block(value, old.dtype if not old.is_pointer else core.int32)
        if block.is_pointer != old.is_pointer or (old.is_pointer and block.base is not old.base):
            raise self.error(node, f"'{name}' changes what it points into inside a loop")
        if not old.is_pointer and block.dtype != old.dtype:
            raise self.error(node, f"'{name}' is {old.dtype} before the loop and {block.dtype} inside it; "
                                   f"convert it with .to({_tl_name(old.dtype)})")
        try:
            shape = semantics.broadcast_shapes(block.shape, old.shape)
        except semantics.Diagnostic:
            shape = None
        if shape != old.shape:
            raise self.error(node, f"'{name}' has shape {list(old.shape)} before the loop and "
                                   f"{list(block.shape)} inside it")
        if block.buffer is not None and block.buffer.same_as(buf):
            return   # computed in place (a dot into its accumulator)
        if not self.reads_only_own_elements(block, buf, old.shape):
            block = self.emit.materialise(block, name)
        self.emit.fill(buf, Block(block.dtype, old.shape, lambda index: block.element(index)))

    def visit_If(self, node: ast.If) -> None:
        condition = self.value(node.test)
        if not isinstance(condition, Block):
            self.body(node.body if condition else node.orelse)
            return
        if condition.shape:
            raise self.error(node.test, "an `if` needs a scalar condition (use tl.where for a block)")
        before = set(self.scope)
        with self.carrying(node.body + node.orelse, node):
            with T.If(cast(condition.at(()), core.int1)):
                self.depth += 1
                with T.Then():
                    self.body(node.body)
                if node.orelse:
                    with T.Else():
                        self.body(node.orelse)
                self.depth -= 1
        self.forget_since(before)

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "a `for` loop in a kernel cannot have an `else`")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "a loop variable is one name")
        kind, bounds, call = self.loop_bounds(node.iter)
        if kind == "static":
            for i in range(*bounds):
                self.scope[node.target.id] = i
                self.body(node.body)
            return
        start, stop, step = (self.as_block(b, core.int32) for b in bounds)
        if any(b.shape for b in (start, stop, step)):
            raise self.error(call, "loop bounds are scalars")
        dtype = core.int64 if core.int64 in (start.dtype, stop.dtype, step.dtype) else core.int32
        lo, hi, st = (cast(b.at(()), dtype) for b in (start, stop, step))
        zero, one = tirx.const(0, dtype.tvm), tirx.const(1, dtype.tvm)
        # the trip count; a run-time step is taken to be positive, as in every grid-stride loop
        count = tirx.max(zero, tirx.floordiv(hi - lo + st - one, st))
        if isinstance(bounds[2], int) and bounds[2] < 0:
            count = tirx.max(zero, tirx.floordiv(lo - hi - st - one, -st))
        before = set(self.scope)
        with self.carrying(node.body, node):
            with T.serial(zero, count) as i:
                self.ib.name(f"{node.target.id}_iter", i)
                var = self.ib.name(node.target.id, T.Bind(lo + i * st))
                self.scope[node.target.id] = scalar(dtype, var)
                self.depth += 1
                self.body(node.body)
                self.depth -= 1
        self.forget_since(before)

    def forget_since(self, before: set) -> None:
        """Names first bound inside a loop or a branch have no value after it (as in Triton)."""
        for name in list(self.scope):
            if name not in before:
                del self.scope[name]

    def loop_bounds(self, node: ast.expr):
        """("static", bounds) for tl.static_range (unrolled), ("loop", (start, stop, step), call) for
        range / tl.range."""
        fn = self.value(node.func) if isinstance(node, ast.Call) else None
        if fn not in (core.static_range, core.range, range):
            raise self.error(node, "a kernel loops over range(...), tl.range(...) or tl.static_range(...)")
        args = [core.unwrap(self.value(a)) for a in node.args]
        if not 1 <= len(args) <= 3:
            raise self.error(node, "a range takes one to three bounds")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1) if len(args) == 2 else args
        if isinstance(step, int) and step == 0:
            raise self.error(node, "a range's step cannot be 0")
        if fn is core.static_range:
            if any(isinstance(b, Block) for b in (start, stop, step)):
                raise self.error(node, "tl.static_range takes constexpr bounds")
            return "static", (start, stop, step), node
        return "loop", (start, stop, step), node

    def visit_While(self, node: ast.While) -> None:
        raise self.error(node, "`while` loops are not supported in kernels (use `for ... in range(...)`)")

    def visit_Return(self, node: ast.Return) -> None:
        if self.depth:
            raise self.error(node, "`return` inside a run-time `if` or loop is not supported (only at the end of "
                                   "a function, or under an `if` on a constexpr)")
        raise Return(None if node.value is None else self.value(node.value), node)

    def visit_Assert(self, node: ast.Assert) -> None:
        condition = self.value(node.test)
        if isinstance(condition, Block):
            raise self.error(node, "`assert` takes a constexpr condition (tl.device_assert checks values)")
        if not condition:
            raise self.error(node, "assertion failed while compiling the kernel")

    def generic_visit(self, node: ast.AST):
        raise self.error(node, f"{type(node).__name__} is not supported in a Triton kernel")

    # --- loop-carried values ------------------------------------------------------------------------

    def carrying(self, statements: list[ast.stmt], node: ast.AST):
        """A context in which the names bound before and assigned in `statements` live in buffers."""
        return _Carrying(self, [n for n in _assigned(statements) if n in self.scope and n not in self.carried], node)

    def reads_carried(self, block: Block) -> bool:
        index = tuple(tirx.Var(f"k{axis}", "int32") for axis in range(len(block.shape)))
        expr = block.at(index)
        return any(load.source.same_as(buf) for load in _loads(expr) for buf in self.carried.values())

    def reads_only_own_elements(self, block: Block, buf, shape) -> bool:
        """Whether `block` at an index reads `buf` only at that index (so it may be written in place)."""
        index = tuple(tirx.Var(f"k{axis}", "int32") for axis in range(len(shape)))
        expr = block.element(index)
        own = list(index) or [0]
        for load in _loads(expr):
            if load.source.same_as(buf) and not all(
                    tvm_ffi.structural_equal(a, b) for a, b in zip(load.indices, own)):
                return False
        return True


class _Carrying:
    """Move `names` into buffers for the statements (each assignment then writes the buffer)."""

    def __init__(self, compiler: KernelCompiler, names: list[str], node: ast.AST):
        self.compiler, self.names, self.node = compiler, names, node

    def __enter__(self):
        c = self.compiler
        for name in self.names:
            try:
                block = c.as_block(c.scope[name], None)
            except Diagnostic as e:
                raise c.error(self.node, f"'{name}' changes inside this loop or branch, so it must be a "
                                         f"value of the kernel: {e}") from None
            if block.is_pointer:
                buf = c.emit.alloc(block.shape, core.int64, name)
            else:
                buf = c.emit.alloc(block.shape, block.dtype, name)
            c.emit.fill(buf, block)
            c.scope[name] = reading(buf, block)
            c.carried[name] = buf
        return self

    def __exit__(self, *exc):
        for name in self.names:
            del self.compiler.carried[name]
        return False


def _assigned(statements) -> list[str]:
    names = []
    for stmt in statements:
        for node in ast.walk(stmt):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id not in names:
                        names.append(name.id)
    return names


def _calls_math(block: Block) -> bool:
    """Whether computing an element calls a math function (worth computing once, not per use)."""
    found = []
    expr = block.at(tuple(tirx.Var(f"k{axis}", "int32") for axis in range(len(block.shape))))
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, found.append))
    return bool(found)


def _loads(expr) -> list:
    """The buffer reads in an expression."""
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, found.append))
    return found


def _tl_name(dtype: core.dtype) -> str:
    return "tl." + repr(dtype).rsplit(".", 1)[-1]

