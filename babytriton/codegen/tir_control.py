"""Control flow for the TIR visitor: `if` (on a compile-time condition only the branch taken is compiled),
`for` over range() or bt.parallel(), `while`, and `break` / `continue` through flags, since TVM cannot
compile them for CPUs. A name first assigned in a run-time loop or branch ends with it (`runtime_block`)."""
from __future__ import annotations

import ast
from contextlib import contextmanager

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..core.errors import Diagnostic
from .tir_values import INT64, Loop, describe, dtype_of, is_expr, leaves, loads_memory, parallel


class TIRControl:
    """The control flow of TIRCodeGen (a mixin: it uses the visitor's scope, analyzer and casts)."""

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
