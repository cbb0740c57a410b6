"""Statements for the TIR visitor: the PrimFunc and its parameters, the body, and assignment: a name that
changes at run time gets a one-element buffer (a `Local`) of the dtype the passes settle; a subscript
writes an element of a tensor parameter."""
from __future__ import annotations

import ast

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..core.errors import Diagnostic
from .tir_values import (INT64, Local, Note, TensorParam, describe, is_expr, join, kind_of, leaves, loads_memory,
                         storage_dtype, uses_any)


class TIRStatements:
    """The statements and assignments of TIRCodeGen (a mixin: it uses the visitor's scope, loops and casts)."""

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
