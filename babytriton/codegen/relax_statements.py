"""Statements for the Relax visitor: the function and its parameters, assignment and unpacking, `assert`,
`with bt.device(...)`, and the hand-off of `return`, `if`, `for`, `while`, `break` and `continue` to the
control flow (control.py, loops.py)."""
from __future__ import annotations

import ast
import math

from tvm import relax
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic
from ..core.types import format_size
from ..frontend import devices
from . import library, mutation
from .values import describe, dtype_of, is_plain, is_symbolic, is_tensor, shape_of


def _escape(text: str) -> str:
    """Text for a run-time check's message template, which fills `{}`."""
    return text.replace("{", "{{").replace("}", "}}")


class RelaxStatements:
    """The statements of RelaxCodeGen (a mixin: it uses the visitor's scope, emit and flow)."""

    def visit_FunctionDef(self, node: ast.FunctionDef):
        if node is not self.parsed.tree:
            raise Diagnostic(f"nested function definitions are not supported in @jit functions; define "
                             f"`{node.name}` at module level (decorated with @bt.jit) and call it")
        with RB.function():
            RB.func_name(node.name)
            with self.scope.frame():
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                for arg in args:
                    self.declare_param(arg)
                for arg in args:   # after every parameter: the function's bindings begin here
                    self.caller_view(arg.arg)
                mutation.start(self)  # the tensor parameters, as the caller's tensors
                self.visit_body(node.body)
                RB.func_ret_value(mutation.results(self, self.to_expr(self.returned)))  # and those updated in place
                if mutation.state(self).written:  # which results those are: inplace.py writes them in place
                    RB.func_attr({mutation.WRITTEN: list(mutation.state(self).written)})

    def declare_param(self, arg: ast.arg):
        spec = self.specs[arg.arg]
        if spec.kind == "constexpr":
            self.scope.assign(arg.arg, spec.value)
            return
        shape = tuple(self.symbolic(d) if isinstance(d, str) else d for d in spec.shape)
        if spec.layout is not None:   # the caller's tensor passed as its storage (frontend/layouts.py)
            shape = spec.layout.storage_shape(shape)
        vdevice = self.placement.param_vdevice(spec) if self.placement is not None else None
        var = RB.arg(arg.arg, relax.TensorType(list(shape), spec.dtype, vdevice=vdevice))
        self.params.add(var)
        if spec.kind == "scalar":  # a run-time number promotes as the Python number it is (torch's rule)
            self.weak.append(var)
        self.scope.assign(arg.arg, var)

    def caller_view(self, name: str) -> None:
        """A parameter passed as a permuted or broadcast tensor's storage, seen as the caller's view of
        it: `permute_dims` and `broadcast_to`, which the passes fold into the kernels that read it."""
        spec = self.specs[name]
        if spec.kind != "tensor" or spec.layout is None:
            return
        layout, value = spec.layout, self.scope.lookup(name)
        if layout.permuted:
            value = self.emit(relax.op.permute_dims(value, list(layout.inverse)))
        if layout.broadcast:
            shape = [self.symbolic(d) if isinstance(d, str) else d for d in spec.shape]
            value = self.emit(relax.op.broadcast_to(value, shape))
        self.scope.assign(name, value)

    def visit_body(self, body: list[ast.stmt]):
        """Compile the function's statements in order; `return`, `if` and loops steer (control.py)."""
        self.flow.run_body(body)

    def visit_Return(self, node: ast.Return):
        self.flow.visit_return(node)

    def return_value(self, node: ast.Return):
        """The value a `return` gives back; with device blocks, on the device the placement rules say."""
        value = self.visit(node.value) if node.value is not None else None
        self.check_returnable(value)
        if self.placement is not None and value is not None:
            value = self.placement.result(node.value, value, self.to_expr)
        return value

    def visit_If(self, node: ast.If):
        self.flow.visit_if(node)

    def visit_For(self, node: ast.For):
        self.loops.visit_for(node)

    def visit_While(self, node: ast.While):
        self.loops.visit_while(node)

    def visit_Break(self, node: ast.Break):
        self.flow.visit_exit(node)

    visit_Continue = visit_Break

    def visit_Assert(self, node: ast.Assert):
        """`assert test, message`: a test known at compile time is checked now (a located error); one on
        symbolic sizes when the code runs; one on tensor data (a one-element tensor) when it runs on
        the CPU. On a GPU a data test is not checked: reading it would make the host wait for the device."""
        if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):  # each part, in order
            for part in node.test.values:
                self.visit_Assert(ast.copy_location(ast.Assert(part, node.msg), node))
            return
        test = self.visit(node.test)
        if hasattr(test, "asobject"):  # TVM's `==` / `!=` of sizes: the comparison itself, not its bool
            test = test.asobject()
        if is_tensor(test):
            self.assert_data(node, test)
        elif is_symbolic(test):
            template, sizes = self.assert_message(node)
            library.run_time_check(self, test, template, *sizes)
        elif not test:
            template, sizes = self.assert_message(node)
            raise Diagnostic(template.format(*map(format_size, sizes)))

    def assert_message(self, node: ast.Assert) -> tuple[str, list]:
        """What a failed assert says, as a run-time check's template (`{}` where the f-string message
        shows a symbolic size, filled in with the call's size) and those sizes."""
        if node.msg is None:
            return _escape(f"AssertionError: assert {ast.unparse(node.test)}"), []
        parts = node.msg.values if isinstance(node.msg, ast.JoinedStr) else [node.msg]
        template, sizes = "AssertionError: ", []
        for part in parts:
            value = self.visit(part.value if isinstance(part, ast.FormattedValue) else part)
            if is_symbolic(value) and isinstance(part, ast.FormattedValue) and part.format_spec is None:
                template += "{}"
                sizes.append(value)
            elif isinstance(part, ast.FormattedValue):
                template += _escape(self.formatted(value, part))
            elif is_plain(value) or isinstance(value, str):
                template += _escape(str(value))
            else:
                raise self.error(part, f"an assert's message must be known at compile time, got {describe(value)}")
        return template, sizes

    def assert_data(self, node: ast.Assert, test) -> None:
        if any(not isinstance(d, int) for d in shape_of(test)) or math.prod(shape_of(test)) != 1:
            raise Diagnostic(f"assert of {describe(test)}: Boolean value of Tensor with more than one value is "
                             "ambiguous; reduce it first, e.g. `assert (x >= 0).all()`")
        if self.options.device_kind != "cpu" or self.placement is not None:
            return  # not checked on a GPU (book/docs/guide/semantics.md, "assert")
        test = test if dtype_of(test) == "bool" else self.emit(relax.op.not_equal(test, self.const(0, dtype_of(test))))
        if test.ty.ndim:
            test = self.emit(relax.op.reshape(test, ()))
        template, sizes = self.assert_message(node)
        library.run_time_check(self, test, template, *sizes)

    def visit_With(self, node: ast.With):
        # `with bt.device(...)`: the block's operations run on that device (see babytriton.frontend.devices).
        kind = devices.block_device(node, self.visit, self.error)
        self.placement.enter(kind, node)
        self.flow.splice_block(node.body, self.placement.leave)

    def assign(self, target: ast.expr, value, node: ast.AST | None = None):
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
            mutation.note_binding(self, node, target)  # `y = x.view(...)`: y is a view of x in torch
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts))
            for sub, item in zip(target.elts, items):
                self.assign(sub, item)
            mutation.note_binding(self, node, target)  # `a, b = x.chunk(2)`: views of x in torch
        elif isinstance(target, ast.Subscript):  # `x[i] = v`: x rebound to the updated tensor (torch's meaning)
            mutation.assign_subscript(self, target, value)
        else:
            raise self.error(target, f"cannot assign to {ast.unparse(target)}")

    def unpack(self, value, count: int) -> list:
        if isinstance(value, (tuple, list)):
            items = list(value)
        elif isinstance(value, relax.Expr) and isinstance(value.ty, relax.TupleType):
            items = [self.emit(relax.TupleGetItem(value, i)) for i in range(len(value.ty.fields))]
        else:
            raise Diagnostic(f"cannot unpack {describe(value)} into {count} names")
        if len(items) != count:
            raise Diagnostic(f"cannot unpack {len(items)} values into {count} names")
        return items
