"""The Relax backend: one ast.NodeVisitor that drives TVM's Relax IRBuilder.

Values while compiling are either compile-time Python values (ints, floats, bools, tuples, shape
entries) or Relax expressions (tensors). Python values fold at compile time; a Python number
meeting a tensor takes the tensor's dtype, as in torch.
"""
from __future__ import annotations

import ast
import builtins
import functools
import gc
import inspect
import math
import os

import torch
import tvm_ffi
from tvm import relax, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

from ..frontend import devices
from ..frontend.arguments import ArgSpec, Specialise
from ..core.errors import CompilationError, Diagnostic, debug_enabled, quiet_tvm
from ..frontend.function import plain_function
from ..frontend.source import ParsedFunction
from ..core.types import TORCH_TO_NAME, DtypeName, Tensor, format_shape, format_size, is_float_dtype
from . import inline, kernels, library, mutation, operators, pytorch, semantic
from .pytorch import indexing
from .base import CodeGenerator
from .control import Flow
from .loops import Loops
from .scope import Undefined
from .values import (PY_BUILTINS, PY_SCALARS, broadcast, describe, dtype_of, is_python_scalar, is_symbolic,
                     is_tensor, promote, round_float, same_size, scalar_kind, shape_of, wrap_int)
from .values import compare_sizes, size_expr

# Python builtins for watching a run, which compiled code cannot call: eager mode runs them.
_EAGER_HINT = ("compiled code does not run Python; to watch values, run the function eagerly: f.eager(...), or "
               "set BABYTRITON_INTERPRET=1")
PYTHON_ONLY = {"print": f"print() cannot be called from @jit code: {_EAGER_HINT}",
               "breakpoint": f"breakpoint() cannot be called from @jit code: {_EAGER_HINT}",
               "input": "input() cannot be called from @jit code: pass values in as parameters",
               "open": "open() cannot be called from @jit code: read files before the call and pass tensors in"}


def _drop_frames(error: BaseException) -> None:
    """Forget the frames an error and the exceptions chained to it were raised through."""
    while error is not None:
        error.__traceback__ = None
        chained, error.__context__, error.__cause__ = error.__context__ or error.__cause__, None, None
        error = chained


def _plain(value) -> bool:
    """A compile-time value that Python compares by itself: numbers, strings, dtypes, None, tuples of them."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (*PY_SCALARS, str, torch.dtype, torch.device))


def _escape(text: str) -> str:
    """Text for a run-time check's message template, which fills `{}`."""
    return text.replace("{", "{{").replace("}", "}}")


# `*` and `+` on bools, as torch computes them
BOOL_ARITH = {ast.Mult: relax.op.logical_and, ast.Add: relax.op.logical_or}
IDENTITY = {ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}


# Builtins on compile-time sequences: len(), tuple(), list() (comprehensions give tuples).
SEQUENCE_BUILTINS = {"len", "tuple", "list"}

# Float `x ** n` for an integral constant n up to this many multiplies (by squaring) instead of calling pow.
MAX_SQUARING_EXPONENT = 16


class RelaxCodeGen(CodeGenerator):
    """Compiles one parsed Python function into a Relax function inside an IRModule."""

    describe = staticmethod(describe)

    def __init__(self, parsed: ParsedFunction, specs: dict[str, ArgSpec], options=None):
        super().__init__(parsed, specs, options)
        self.params: set = set()       # the Relax function's parameters (never renamed)
        self.user_named: set = set()   # Relax vars already given a user's name
        self.returned = None           # the value the function returns, once its end is compiled
        # With `with bt.device(...)` blocks: where each value lives (None: one device, no vdevices).
        self.placement = devices.Placement(options.target, specs, self.scope,
                                           parsed.source_map) \
            if devices.uses_device_blocks(parsed.tree) else None
        # Which source line (relative to the parsed def) produced each emitted binding: the
        # fusion map relates fused kernels back to them (babytriton/runtime/fusion.py).
        self.binding_lines: dict[relax.Var, int] = {}
        self.binding_nodes: dict[relax.Var, ast.AST] = {}  # and the expression: TVM's failures point there
        self.lineno = None             # line of the innermost node being compiled
        self.node = None               # the innermost node with a location being compiled
        self.kernels: list = []        # kernels.Declared: the TensorIR kernels added to the module
        self.inline_chain: list = [parsed.fn]  # the @jit functions being compiled, outermost first
        self.weak: list = []           # 0-d tensors that promote like Python numbers (see `is_weak`)
        self.bindings: dict = {}       # emitted var -> its expression: which parameters a value comes from
        self.flow = Flow(self)         # `if`, exits and the plumbing of loops (control.py)
        self.loops = Loops(self.flow)  # `for` and `while` (loops.py)
        # (symbolic size, the size it was matched to, where): checked at each call (see `aligned`)
        self.size_checks: list = []
        self.builder = library.RelaxBuilder(self)  # what the shared operator rules (semantic) build with

    # ------------------------------------------------------------------------------------------
    # driver and the one error path
    # ------------------------------------------------------------------------------------------
    def build(self):
        # TVM warns from C++ about the builders that its failed checks abandon (a user's error):
        # quiet while compiling, and while the builder of a failed compile is freed.
        with quiet_tvm():
            try:
                with IRBuilder() as ib:
                    self.ib = ib
                    with I.ir_module():
                        self.visit(self.parsed.tree)
                        if self.placement is not None:
                            I.module_global_infos({"vdevice": self.placement.used()})
            except BaseException as e:
                # The error's traceback holds the visitor's frames, and they the builder's: a
                # user's error drops them (BABYTRITON_DEBUG=1 keeps them, and the warnings).
                self.ib = ib = None
                if isinstance(e, (CompilationError, Specialise)) and not debug_enabled():
                    _drop_frames(e)
                    _drop_frames(getattr(e, "error", None))  # Specialise: the error it stands in for
                gc.collect()
                raise
        return ib.get()

    def share(self, caller: "RelaxCodeGen", chain: list) -> None:
        """Emit into `caller`'s function and module (for inlining a @jit function it calls), on the
        device of the block the call is in."""
        self.ib, self.params, self.user_named = caller.ib, caller.params, caller.user_named
        self.sym_vars, self.kernels, self.inline_chain = caller.sym_vars, caller.kernels, chain
        self.placement = caller.placement
        self.size_checks = caller.size_checks
        self.weak = caller.weak  # the numbers the caller passes stay numbers here
        self.bindings = caller.bindings
        self.flow.caller = caller.flow

    def inline(self, values: dict):
        """Compile this function's body in place with its parameters bound to `values`; its value."""
        with self.scope.frame():
            for name, value in values.items():
                self.scope.assign(name, value)
            self.visit_body(self.parsed.tree.body)
        return None if isinstance(self.returned, tuple) and not self.returned else self.returned

    def visit(self, node):
        outer_line, outer_node = self.lineno, self.node
        self.lineno = getattr(node, "lineno", outer_line)
        if hasattr(node, "lineno"):
            self.node = node
        try:
            return super().visit(node)
        finally:
            self.lineno, self.node = outer_line, outer_node

    # ------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------
    def emit(self, expr: relax.Expr) -> relax.Var:
        var = self._emit(expr)
        self.bindings[var] = expr
        if self.lineno is not None:
            self.binding_lines[var] = self.lineno
            self.binding_nodes[var] = self.node
        return var

    def _emit(self, expr: relax.Expr) -> relax.Var:
        if self.placement is None:
            return RB.emit(expr)
        if isinstance(expr, relax.Call):  # operands move to the device of the block being compiled
            expr = self.placement.place_call(expr, self.emit)
        return self.placement.settle(RB.emit(expr))

    def const(self, value, dtype: str | None = None) -> relax.Expr:
        """A Python value as a 0-d Relax constant; default dtypes follow torch (int64, float32)."""
        if dtype is None:
            dtype = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"
        if dtype.startswith(("int", "uint")) and isinstance(value, float) and not value.is_integer():
            raise Diagnostic(f"the float {value!r} cannot be exactly represented as {dtype}")
        if dtype.startswith(("int", "uint")):
            value = wrap_int(int(value), dtype)
        elif is_float_dtype(dtype):
            value = round_float(value, dtype)  # beyond the dtype's range: ±inf, as in torch
        return relax.const(value, dtype)

    def as_tensor(self, value, dtype: str) -> relax.Expr:
        """An operand as a tensor of `dtype` (casting tensors, materialising Python numbers)."""
        if is_tensor(value):
            return value if dtype_of(value) == dtype else self.emit(relax.op.astype(value, dtype))
        if is_python_scalar(value):
            return self.const(value, dtype)
        raise Diagnostic(f"expected a tensor or a number, got {describe(value)}")

    def operand(self, value):
        """Check that a value can take part in arithmetic (the rule eager shares)."""
        return semantic.operand(self.builder, value)

    def to_expr(self, value) -> relax.Expr:
        """A value as a Relax expression, for returning it."""
        if isinstance(value, relax.Expr):
            return value
        if is_python_scalar(value):
            return self.const(value)
        if isinstance(value, tuple):
            return relax.Tuple([self.to_expr(v) for v in value])
        if value is None:
            return relax.Tuple([])
        raise Diagnostic(f"cannot return {describe(value)} from a @jit function")

    def check_returnable(self, value) -> None:
        """What `to_expr` can return (checked at the `return`, so that the error points there)."""
        if isinstance(value, tuple):
            for item in value:
                self.check_returnable(item)
        elif not (value is None or isinstance(value, relax.Expr) or is_python_scalar(value)):
            raise Diagnostic(f"cannot return {describe(value)} from a @jit function; return tensors, numbers or "
                             "tuples of them")

    def bind(self, name: str, value) -> None:
        """Give a freshly computed Relax var the user's name (once), and record it in the scope."""
        if isinstance(value, relax.Var) and not is_symbolic(value) and value not in self.user_named \
                and not self._is_param(value):
            self.ib.name(name, value)
            self.user_named.add(value)
        self.scope.assign(name, value)
        if self.placement is not None:
            self.placement.assigned(name)

    def _is_param(self, var) -> bool:
        return var in self.params

    # ------------------------------------------------------------------------------------------
    # statements
    # ------------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef):
        if node is not self.parsed.tree:
            raise Diagnostic(f"nested function definitions are not supported in @jit functions; define "
                             f"`{node.name}` at module level (decorated with @bt.jit) and call it")
        with RB.function():
            RB.func_name(node.name)
            with self.scope.frame():
                for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    self.declare_param(arg)
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
        vdevice = self.placement.param_vdevice(spec) if self.placement is not None else None
        var = RB.arg(arg.arg, relax.TensorType(list(shape), spec.dtype, vdevice=vdevice))
        self.params.add(var)
        if spec.kind == "scalar":  # a run-time number promotes as the Python number it is (torch's rule)
            self.weak.append(var)
        self.scope.assign(arg.arg, var)

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
            elif _plain(value) or isinstance(value, str):
                template += _escape(str(value))
            else:
                raise self.error(part, f"an assert's message must be known at compile time, got {describe(value)}")
        return template, sizes

    def assert_data(self, node: ast.Assert, test) -> None:
        if any(not isinstance(d, int) for d in shape_of(test)) or math.prod(shape_of(test)) != 1:
            raise Diagnostic(f"assert of {describe(test)}: Boolean value of Tensor with more than one value is "
                             "ambiguous; reduce it first, e.g. `assert (x >= 0).all()`")
        if self.options.device_kind != "cpu" or self.placement is not None:
            return  # not checked on a GPU (README, "assert")
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

    # ------------------------------------------------------------------------------------------
    # expressions
    # ------------------------------------------------------------------------------------------
    def local(self, name: str, value):
        if isinstance(value, Undefined):  # not assigned on every path to here: the message says why
            raise Diagnostic(value.message)
        return value

    def python_value(self, name: str, value):
        if hasattr(value, "item") and getattr(value, "shape", None) == () and not isinstance(value, torch.Tensor):
            value = value.item()  # numpy scalars
        return value

    def builtin(self, name: str):
        """Python's builtins that fold on compile-time values, and the Relax operators the function
        doesn't bind (`sigmoid(x)`); None for other names."""
        if name in PY_BUILTINS or name in SEQUENCE_BUILTINS:
            return getattr(builtins, name)
        op = library.lookup(name)
        if op is not None:
            return op
        if name in PYTHON_ONLY:
            raise Diagnostic(PYTHON_ONLY[name])
        return None

    def undefined_hint(self, name: str, known: set) -> str:
        return library.did_you_mean(name, known | library.names()) or \
            "; assign it before this line, pass it as a parameter, or define it at module level"

    def binary(self, op: ast.operator, lhs, rhs):
        kind = type(op)
        if not (is_tensor(lhs) or is_tensor(rhs)):
            if is_symbolic(lhs) or is_symbolic(rhs) or (
                    is_python_scalar(lhs) and is_python_scalar(rhs)):
                if kind in (ast.FloorDiv, ast.Mod) and is_symbolic(rhs):
                    # a size the VM computes as soon as its parts are known (before any check runs):
                    # its division would trap on 0, so it divides by 1 then, and the check raises
                    library.run_time_check(self, rhs != 0, f"integer `{operators.SYMBOL[kind]}` by zero: the size "
                                           f"`{rhs}` is 0 in this call (Python raises ZeroDivisionError)")
                    rhs = tirx.Select(rhs == 0, tirx.const(1, rhs.ty.dtype), rhs)
                try:
                    return operators.PY_BINARY[kind](lhs, rhs)
                except ZeroDivisionError:
                    raise Diagnostic("division by zero in a compile-time expression") from None
            if isinstance(lhs, tuple) and isinstance(rhs, tuple) and kind is ast.Add:
                return lhs + rhs
        lhs, rhs = (self.size_value(v) if is_symbolic(v) else v for v in (lhs, rhs))  # `x / x.size(-1)`
        lhs, rhs = self.operand(lhs), self.operand(rhs)
        sym = operators.SYMBOL[kind]
        both_weak = self.is_weak(lhs) and self.is_weak(rhs)
        dtype = self.operator_dtype(sym, lhs, rhs)
        result = self._binary(kind, sym, lhs, rhs, dtype)
        if both_weak and is_tensor(result):
            self.weak.append(result)
        return result

    def _binary(self, kind, sym: str, lhs, rhs, dtype: str):
        if kind in operators.BITWISE:
            if is_float_dtype(dtype):
                raise Diagnostic(f"`{sym}` needs bool or integer operands, got {describe(lhs)} and {describe(rhs)}")
            int_op, bool_op = operators.BITWISE[kind]
            return self.emit_binary(int_op if dtype != "bool" else bool_op, lhs, rhs, dtype, sym)
        if kind in (ast.LShift, ast.RShift):  # torch's shifts, counts out of range included (pytorch.misc)
            return pytorch.misc.shift(self.builder, "left" if kind is ast.LShift else "right", lhs, rhs)
        if kind not in operators.ARITH:
            raise Diagnostic(f"the operator `{sym}` is not supported on tensors")
        if kind is ast.Div and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]  # true division, as in Python and torch
        if dtype == "bool" or kind is ast.Sub and any(is_tensor(v) and dtype_of(v) == "bool" for v in (lhs, rhs)) \
                and not (self.is_weak(lhs) and self.is_weak(rhs)):
            return self.bool_arithmetic(kind, sym, lhs, rhs, dtype)
        if kind is ast.MatMult:
            return self.matmul(lhs, rhs)
        if kind is ast.Pow and not is_float_dtype(dtype):
            return self.integer_power(lhs, rhs, dtype)
        if kind in (ast.Div, ast.FloorDiv, ast.Mod) and is_python_scalar(rhs) and rhs == 0:
            return self.divide_by_zero(kind, sym, lhs, rhs, dtype)
        if kind in (ast.FloorDiv, ast.Mod) and not is_float_dtype(dtype) and is_tensor(rhs):
            self.check_nonzero_divisor(self.as_tensor(rhs, dtype), sym)
        if kind is ast.Pow and is_tensor(lhs) and is_python_scalar(rhs) and not isinstance(rhs, bool) and \
                float(rhs).is_integer() and 1 <= abs(rhs) <= MAX_SQUARING_EXPONENT:
            # `x ** 2` multiplies, as torch does: exact, and right for a negative x on a GPU, where TVM
            # builds CUDA with --use_fast_math and powf(-2, 2) becomes exp2(2 * log2(-2)), a NaN
            result = self.power_by_squaring(self.as_tensor(lhs, dtype), abs(int(rhs)))
            return result if rhs > 0 else self.emit(relax.op.divide(self.const(1, dtype), result))
        if kind is ast.Pow and dtype == "bfloat16":  # TVM's pow has no bfloat16: float32, rounded once
            return self.emit(relax.op.astype(self.emit_binary(relax.op.power, lhs, rhs, "float32", sym), dtype))
        wide = self.half_with_number(kind, sym, lhs, rhs, dtype)
        if wide is not None:
            return wide
        return self.emit_binary(operators.ARITH[kind], lhs, rhs, dtype, sym)

    def bool_arithmetic(self, kind, sym: str, lhs, rhs, dtype: str):
        """Arithmetic on bools as torch has it: `*` is logical and, `+` logical or; `-` with a bool
        tensor, and the others, are refused in torch's words."""
        if kind is ast.Sub:
            raise Diagnostic("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                             "`logical_xor()` operator instead." if dtype == "bool" else
                             "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                             "to invert a mask, use the `~` or `logical_not()` operator instead.")
        if kind not in BOOL_ARITH:
            raise Diagnostic(f"`{sym}` is not implemented for bool tensors (nor in torch); convert them first, "
                             "e.g. with .to(torch.int64)")
        return self.emit_binary(BOOL_ARITH[kind], lhs, rhs, "bool", sym)

    def half_with_number(self, kind, sym: str, lhs, rhs, dtype: str):
        """A half tensor and a number under an operator torch computes in float32 there
        (operators.HALF_WITH_NUMBER_IN_FLOAT32): computed so and rounded once; None for the others.
        A number over a half tensor is torch's `Tensor.__rtruediv__`: the tensor's reciprocal (in its
        dtype) times the number, so `70000 / h` is -35008 for h = -2, not 70000 rounded to inf over h."""
        if kind is ast.Div and dtype in ("float16", "bfloat16") and self.is_weak(lhs) and not self.is_weak(rhs):
            reciprocal = self.emit_binary(relax.op.divide, 1, rhs, dtype, sym)
            return self.half_with_number(ast.Mult, "*", reciprocal, lhs, dtype)
        if kind in operators.HALF_WITH_NUMBER_IN_FLOAT32[self.options.device_kind] and dtype in ("float16", "bfloat16") \
                and self.is_weak(rhs) != self.is_weak(lhs) and not (kind is ast.Div and self.is_weak(lhs)):
            wide = self.emit_binary(operators.ARITH[kind], lhs, rhs, "float32", sym)
            return self.emit(relax.op.astype(wide, dtype))
        return None

    def divide_by_zero(self, kind, sym: str, lhs, rhs, dtype: str):
        """`x / 0.0`, `x // 0.0`, `x % 0.0` with torch's meaning (inf, -inf, nan), written so that TVM
        does not fold a division by the constant zero (which it refuses); integer `//`, `%` by 0
        raise, as torch does."""
        if not is_float_dtype(dtype):
            raise Diagnostic(f"integer `{sym}` by zero: torch raises ZeroDivisionError for it")
        if kind is ast.Mod:  # x - floor(x / 0) * 0: nan everywhere
            return self.emit_binary(relax.op.multiply, lhs, float("nan"), dtype, sym)
        # x / ±0 is x * ±inf, for every x (0 and nan give nan)
        quotient = self.emit_binary(relax.op.multiply, lhs, math.copysign(math.inf, rhs), dtype, sym)
        return self.emit(relax.op.floor(quotient)) if kind is ast.FloorDiv else quotient

    def check_nonzero_divisor(self, divisor, sym: str) -> None:
        """Integer `//` and `%` by a tensor holding a 0 raise when the code runs on a CPU, as torch's
        CPU kernels do (the division itself never traps: legalize.int_floor_divide). On a GPU neither
        torch nor CUDA checks, and reading the answer back would wait for the device."""
        if self.options.device_kind != "cpu" or self.placement is not None:
            return
        zero = self.emit(relax.op.equal(divisor, self.const(0, dtype_of(divisor))))
        found = self.emit(relax.op.max(relax.op.astype(zero, "int8")))   # of no elements: -128
        library.run_time_check(self, self.emit(relax.op.less(found, self.const(1, "int8"))),
                               f"integer `{sym}` by zero: the divisor has a 0 (torch raises ZeroDivisionError)")

    def is_weak(self, value) -> bool:
        """A Python number, or a 0-d tensor standing for one (a run-time scalar parameter, a recursive
        loop's index): it takes the other operand's dtype unless its kind is higher, as in torch."""
        if is_python_scalar(value):
            return True
        return is_tensor(value) and any(value.same_as(w) for w in self.weak)

    def promotion_operand(self, value):
        """What `value` is to torch's promotion: a weak 0-d tensor counts as a Python number of its kind."""
        if is_tensor(value) and not is_python_scalar(value) and self.is_weak(value):
            dtype = dtype_of(value)
            return False if dtype == "bool" else 0.0 if is_float_dtype(dtype) else 0
        return value

    def operator_dtype(self, symbol: str, lhs, rhs) -> str:
        """The dtype a binary operator or comparison computes in: two weak operands compute as
        Python does (operators.weak_dtype), anything else by torch's promotion."""
        if self.is_weak(lhs) and self.is_weak(rhs):
            return operators.weak_dtype(symbol, [scalar_kind(v) for v in (lhs, rhs)])
        return self.promote(lhs, rhs)

    def promote(self, *values) -> str:
        """The dtype operands combine to (torch.result_type), weak 0-d tensors counting as numbers."""
        return promote(*(self.promotion_operand(v) for v in values))

    def emit_binary(self, relax_op, lhs, rhs, dtype: str, sym: str):
        if is_tensor(lhs) and is_tensor(rhs) and broadcast(shape_of(lhs), shape_of(rhs)) is None:
            raise Diagnostic(f"shapes {format_shape(shape_of(lhs))} and {format_shape(shape_of(rhs))} "
                             f"cannot be broadcast together for `{sym}`")
        return self.emit(relax_op(*self.aligned(self.as_tensor(lhs, dtype), self.as_tensor(rhs, dtype))))

    def aligned(self, *operands) -> list:
        """Operands of an element-wise op, each symbolic size that meets a static size on its axis
        (`n` against 4) matched to it: Relax cannot infer the result's shape otherwise. The sizes
        are trusted to match (see `broadcast`); the match is checked at each call. Sizes of one
        symbolic size (`n - 1` against `max(n - 1, 0)`) are matched likewise (`aligned_size`); two
        different symbolic sizes on one axis (`n` against `m`) are refused: nothing says they are equal."""
        tensors = [v for v in operands if is_tensor(v) and v.ty.shape is not None]
        if len(tensors) < 2 or all(isinstance(d, int) for t in tensors for d in shape_of(t)):
            return list(operands)
        ndim = max(t.ty.ndim for t in tensors)
        target = [1] * ndim
        for t in tensors:
            for axis, size in enumerate(shape_of(t), ndim - t.ty.ndim):
                if isinstance(target[axis], int) and target[axis] == 1 or \
                        isinstance(size, int) and size != 1 and not isinstance(target[axis], int) or \
                        isinstance(target[axis], tirx.Var) and is_symbolic(size) and not isinstance(size, tirx.Var):
                    # a static size wins over a symbolic one, an expression over a bare name: TVM crashes
                    # matching `n` to an expression of n (it reads the match as defining n by itself)
                    target[axis] = size
        result = []
        for value in operands:
            if any(value is t for t in tensors):
                shape = list(shape_of(value))
                offset = ndim - len(shape)
                for axis, size in enumerate(shape):
                    want = target[axis + offset]
                    if not isinstance(size, int) and not (isinstance(want, int) and want == 1):
                        shape[axis] = self.aligned_size(size, want)
                if shape != list(shape_of(value)):
                    value = RB.emit_match_cast(value, relax.TensorType(shape, dtype_of(value),
                                                                      vdevice=value.ty.vdevice))
            result.append(value)
        return result

    def aligned_size(self, size, want):
        """The size a symbolic `size` takes to meet `want` (not 1) on an axis: `want` when they are equal
        whatever the sizes (`max(n - 1, 0)` and `min(max(n - 1, 0), n)`) or, checked at each call, when
        they may be; 1 (checked) when they never are, as then only broadcasting a 1 can make them agree."""
        equal = compare_sizes(size, want)
        if equal is True:   # written alike, or cast to one form: Relax's shape inference cannot tell otherwise
            return size if tvm_ffi.structural_equal(size, want) else want
        if equal is None and not isinstance(want, int) and \
                set(tirx.analysis.undefined_vars(size)) != set(tirx.analysis.undefined_vars(want)):
            raise Diagnostic(f"the sizes {want} and {size} meet on one axis here, and nothing says "
                             "they are equal: give them one name in the annotations (or a static "
                             "size), or reshape one")
        if equal is None and isinstance(size, tirx.Var) and isinstance(want, (int, tirx.Var)):
            self.record_size_check(size, want)   # checked before the call, naming the parameter
            return want
        if equal is False and compare_sizes(size, 1) is False:
            raise Diagnostic(f"the sizes {want} and {size} meet on one axis here, and they are never equal, "
                             "nor is the second 1: they cannot be broadcast together")
        message = ("the size {} meets the size {} element-wise here, and must equal it (only a static 1 "
                   "broadcasts)" if equal is None else
                   "the size {} meets the size {} element-wise here, which it never equals: it must be 1 "
                   "to broadcast")
        got = want if equal is None else 1
        library.run_time_check(self, tirx.EQ(size_expr(size, "int64"), size_expr(got, "int64")), message, size, want)
        return got

    def record_size_check(self, size, want) -> None:
        if isinstance(size, tirx.Var) and isinstance(want, (int, tirx.Var)):
            source = self.parsed.source_map
            where = f"line {source.file_line(self.lineno or 1)} of {os.path.basename(source.filename)}"
            self.size_checks.append((size.name, want if isinstance(want, int) else want.name, where))

    def integer_power(self, base, exponent, dtype: str):
        """TVM's power is float-only: a constant exponent multiplies by squaring (exact); a tensor
        exponent goes through float64, exact for results below 2**53."""
        if is_python_scalar(exponent):
            if exponent < 0:
                raise Diagnostic("integers to negative integer powers are not allowed (as in torch)")
            n = int(exponent)
            result = self.power_by_squaring(self.as_tensor(base, dtype), n) if n else self.const(1, dtype)
            if is_tensor(base) and shape_of(result) != shape_of(base):  # x ** 0 keeps x's shape
                result = self.emit(relax.op.broadcast_to(result, base.ty.shape))
            return result
        wide = self.emit_binary(relax.op.power, base, exponent, "float64", "**")
        return self.emit(relax.op.astype(relax.op.round(wide), dtype))

    def power_by_squaring(self, base, n: int):
        """`base ** n` for a positive int n in about log2(n) multiplications."""
        result, square = None, base
        while n:
            if n & 1:
                result = square if result is None else self.emit(relax.op.multiply(result, square))
            n >>= 1
            if n:
                square = self.emit(relax.op.multiply(square, square))
        return result

    def matmul(self, lhs, rhs):
        semantic.check_matmul(self.builder, lhs, rhs)
        a, b = shape_of(lhs), shape_of(rhs)
        if not a or not b:
            raise Diagnostic("`@` needs tensors with at least one dimension")
        k_a, k_b = a[-1], b[-2] if len(b) > 1 else b[0]
        if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
            raise Diagnostic(f"`@` shapes {format_shape(a)} and {format_shape(b)} don't match: "
                             f"inner sizes {k_a} and {k_b} differ")
        dtype = dtype_of(lhs)
        # float16 products accumulate in float32, as torch does: cuBLAS does so where the pipeline
        # hands matmuls to it; elsewhere the product is computed in float32 and rounded once.
        if dtype in ("float16", "bfloat16") and not self.matmul_offloaded(dtype):
            return self.emit(relax.op.astype(relax.op.matmul(lhs, rhs, out_dtype="float32"), dtype))
        return self.emit(relax.op.matmul(lhs, rhs))

    def matmul_offloaded(self, dtype: str) -> bool:
        return self.placement is None and dtype in self.options.matmul_offload

    def visit_UnaryOp(self, node: ast.UnaryOp):
        value = self.visit(node.operand)
        kind = type(node.op)
        if kind in (ast.Not, ast.Invert):  # the rule eager shares
            return semantic.negation(self.builder, operators.SYMBOL[kind], value)
        if not is_tensor(value):
            if is_python_scalar(value) or is_symbolic(value):
                return operators.PY_UNARY[kind](value)
            raise Diagnostic(f"`{operators.SYMBOL[kind]}` cannot be applied to {describe(value)}")
        dtype = dtype_of(value)
        if kind is ast.USub:
            if dtype == "bool":
                raise Diagnostic("`-` on a bool tensor is not supported; use `not` / `~` for logical negation")
            # unsigned: 0 - u, which wraps as torch's `-u` does (TVM's negative multiplies by -1)
            negated = self.emit(relax.op.subtract(self.const(0, dtype), value) if dtype.startswith("uint")
                                else relax.op.negative(value))
            if self.is_weak(value):  # `-s` is still a Python number
                self.weak.append(negated)
            return negated
        return value  # `+`

    def compare(self, op: ast.cmpop, lhs, rhs):
        kind = type(op)
        if kind in (ast.Is, ast.IsNot):  # `mask is None`: the rule eager shares
            return semantic.identity(self.builder, IDENTITY[kind], lhs, rhs)
        if kind in (ast.In, ast.NotIn):
            return self.membership(IDENTITY[kind], lhs, rhs)
        if not (is_tensor(lhs) or is_tensor(rhs)):
            if is_python_scalar(lhs) and is_python_scalar(rhs) or is_symbolic(lhs) \
                    or is_symbolic(rhs):
                return operators.PY_COMPARE[kind](lhs, rhs)
            if _plain(lhs) and _plain(rhs):  # dtype names, shapes, None: `x.dtype == "float16"`
                return operators.PY_COMPARE[kind](lhs, rhs)
        lhs, rhs = (self.size_value(v) if is_symbolic(v) else v for v in (lhs, rhs))  # `i < x.size(0)`
        lhs, rhs = self.operand(lhs), self.operand(rhs)
        dtype = self.operator_dtype(operators.SYMBOL[kind], lhs, rhs)
        # TVM's LLVM backend emits a float compare for bool operands; compare them as int8.
        result = self.emit_binary(operators.COMPARE[kind], lhs, rhs, "int8" if dtype == "bool" else dtype,
                                  operators.SYMBOL[kind])
        if self.is_weak(lhs) and self.is_weak(rhs):  # a Python bool, as in Python
            self.weak.append(result)
        return result

    def membership(self, symbol: str, item, container):
        """`item in (a, b)`: on a symbolic size, `item == a or item == b`, known when the code runs
        (for an assert); else the rule eager shares."""
        if isinstance(container, (tuple, list)) and any(map(is_symbolic, (item, *container))):
            equal = [item == c if is_symbolic(item) else c == item for c in container]
            found = functools.reduce(tirx.Or, [e.asobject() if hasattr(e, "asobject") else tirx.const(bool(e))
                                               for e in equal], tirx.const(False))
            return found if symbol == "in" else tirx.Not(found)
        return semantic.membership(self.builder, symbol, item, container)

    def short_circuits(self, value) -> bool:
        return not is_tensor(value)  # tensors combine element-wise

    def logical(self, op: ast.boolop, lhs, rhs):
        return semantic.logical(self.builder, operators.SYMBOL[type(op)], lhs, rhs)  # the rule eager shares

    def visit_IfExp(self, node: ast.IfExp):
        return semantic.if_else(self.builder, self.visit(node.test),  # the rule eager shares
                                lambda: self.visit(node.body), lambda: self.visit(node.orelse))

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        if is_tensor(value):
            return self.tensor_attribute(value, node.attr)
        if isinstance(value, relax.Expr):
            raise Diagnostic(f"{describe(value)} has no attribute '{node.attr}'")
        try:
            return getattr(value, node.attr)
        except AttributeError:
            what = f"`{ast.unparse(node.value)}`" if inspect.ismodule(value) else describe(value)
            hint = library.did_you_mean(node.attr, [n for n in dir(value) if not n.startswith("_")])
            raise Diagnostic(f"{what} has no attribute '{node.attr}'{hint}") from None

    def tensor_attribute(self, value, attr: str):
        if attr == "shape":
            return shape_of(value)
        if attr == "dtype":
            return DtypeName(dtype_of(value))  # equal to the name and to the torch.dtype
        if attr == "ndim":
            return value.ty.ndim
        found, prop = pytorch.tensor_property(self.builder, value, attr)  # x.device, x.mT
        if found:
            return prop
        prop = library.tensor_property(self, value, attr)  # x.T
        if prop is not None:
            return prop
        method = pytorch.method(value, attr) or library.method(value, attr)  # x.exp, called by visit_Call
        if method is not None:
            return method
        known = ["shape", "dtype", "ndim", *library.tensor_attributes(), *pytorch.METHODS, *pytorch.PROPERTIES]
        hint = f"; call the operator instead: {attr}(x)" if attr in library.names() else \
            library.did_you_mean(attr, known)
        # too many to list: torch's methods and attributes are bt.torch_names()'s `Tensor.` entries
        raise Diagnostic(f"tensors have no attribute '{attr}' here{hint} (bt.torch_names() lists those @jit code has)")

    def subscript(self, value, node: ast.Subscript):
        if is_tensor(value):  # torch's indexing; a basic index gives a view in torch (mutation.note_view)
            index = self.visit(node.slice)
            result = indexing.getitem(self.builder, value, index)
            if indexing.is_view(self.builder, value, index):
                mutation.note_view(self, result, value, ast.unparse(node), index)
            return result
        raise Diagnostic(f"{describe(value)} cannot be indexed")

    # ------------------------------------------------------------------------------------------
    # calls: builtins, library ops, tensor methods, TensorIR kernels, other @jit functions
    # ------------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call):
        if mutation.is_inplace_call(node): return mutation.inplace_call(self, node)  # noqa: E701 - `x.add_(y)`
        func = self.visit(node.func)
        args = self.call_arguments(node.args)
        if any(kw.arg is None for kw in node.keywords):
            raise Diagnostic("`**kwargs` in calls is not supported in @jit functions")
        kwargs = {kw.arg: self.visit(kw.value) for kw in node.keywords}
        name = ast.unparse(node.func)
        if func is len:
            return self.call_len(args, kwargs)
        if func in (tuple, list) or library.resolve(func) is library.lookup("sum") and args and \
                isinstance(args[0], (tuple, list)):
            return self.call_sequence(func, args, kwargs)
        if func in PY_BUILTINS.values() or getattr(func, "__module__", None) == "math":
            return self.call_python(func, args, kwargs)
        if isinstance(func, pytorch.BoundMethod):
            return pytorch.call_method(self.builder, func, args, kwargs)
        if isinstance(func, library.Method):
            return library.call_method(self, func, args, kwargs)
        entry = pytorch.resolve(func)  # torch.exp, F.gelu, torch.Tensor.exp: torch's meaning
        if entry is not None:
            result = pytorch.call(self.builder, entry, args, kwargs)
            if kwargs.get("inplace") is True and node.args:  # F.relu(x, inplace=True) writes x, as in torch
                mutation.store_result(self, node.args[0], result)
            return result
        op = library.resolve(func)
        if op is not None:
            return library.call(self, op, args, kwargs)
        if func is Tensor:  # a type to give a kernel's output: kernel(x, bt.Tensor((n, 4), "float32"))
            try:
                return Tensor(*args, **kwargs)
            except (TypeError, ValueError) as e:
                raise Diagnostic(f"bt.Tensor(shape, dtype): {e}") from None
        if kernels.is_kernel(func):
            return kernels.call(self, func, name, args, kwargs)
        if inline.is_jit_function(func):
            return inline.call(self, func, args, kwargs, self.parsed.source_map.file_line(node.lineno))
        plain = plain_function(func)
        if plain is not None:  # an undecorated Python function: inlined, as torch.compile traces through it
            return inline.call_plain(self, plain, args, kwargs, self.parsed.source_map.file_line(node.lineno))
        raise Diagnostic(self.cannot_call(func, name))

    def cannot_call(self, func, name: str) -> str:
        fname = getattr(func, "__name__", "")
        module = getattr(func, "__module__", None) or ""
        op_name = fname if fname in library.names() else library.OTHER_NAMES.get(fname)
        hint = f"; did you mean the operator '{op_name}'?" if op_name else ""  # torch.sigmoid, numpy.exp, ...
        if module.split(".")[0] == "torch" and callable(func):  # never compiled from torch's own source
            return f"{module}.{fname} is not supported in @jit code (babytriton's torch table has no rule for it){hint}"
        if fname == "<lambda>":
            return (f"cannot call the lambda `{name}` from a @jit function: @jit code inlines the Python "
                    "functions it calls from their source; write it as a `def`")
        if inspect.ismethod(func):
            return (f"cannot call `{name}`, a method of {describe(func.__self__)}, from a @jit function: "
                    "@jit code inlines plain functions only; call a module-level function with the values")
        what = "Python function" if inspect.isfunction(func) else "function" if callable(func) else describe(func)
        return (f"cannot call `{name}` (a {what}) from a @jit function: @jit code calls Relax operators "
                f"(e.g. sigmoid(x), bt.softmax(x)), torch functions, TensorIR kernels and Python functions{hint}")

    def call_sequence(self, func, args: list, kwargs: dict):
        """`tuple(...)`/`list(...)` of a compile-time sequence (a tuple here), and `sum(items, start=0)` of
        one as Python adds it up (`sum(g.square().sum() for g in grads)`), not the library's reduction."""
        if func in (tuple, list):
            if kwargs or len(args) > 1 or args and not isinstance(args[0], (tuple, list)):
                raise Diagnostic(f"{func.__name__}() takes one tuple or list known when compiling, got "
                                 f"{', '.join(describe(a) for a in args)}")
            return tuple(args[0]) if args else ()
        items, start = args[0], args[1] if len(args) > 1 else kwargs.pop("start", 0)
        if kwargs or len(args) > 2:
            raise Diagnostic("sum(items, start=0) of a tuple takes no other arguments")
        total = start
        for item in items:
            total = self.binary(ast.Add(), total, item)
        return total

    def call_len(self, args: list, kwargs: dict):
        if len(args) != 1 or kwargs:
            raise Diagnostic("len() takes exactly one argument")
        (value,) = args
        if is_tensor(value):
            if value.ty.ndim == 0:
                raise Diagnostic("len() of a 0-d tensor is undefined")
            return shape_of(value)[0]
        if not hasattr(type(value), "__len__"):  # a compile-time object's own len() is Python's answer
            raise Diagnostic(f"len() of {describe(value)} is undefined")
        return len(value)

    def call_python(self, func, args: list, kwargs: dict):
        """A builtin (abs, min, max, round, ...) or math function: folded on compile-time numbers;
        on tensors, the library op of the same name (`max(x, axis=1)` is Relax's max): the rule eager shares.
        A symbolic size is an int to int(), and a run-time number to float() and math's functions."""
        if any(map(is_symbolic, args)) and (func is float or getattr(func, "__module__", None) == "math"):
            args = [self.size_value(a) if is_symbolic(a) else a for a in args]
            if func is float and len(args) == 1 and not kwargs:
                return self.builder.weak(self.as_tensor(args[0], "float64"))
        elif func is int and len(args) == 1 and is_symbolic(args[0]) and not kwargs:
            return args[0]
        return semantic.python_call(self.builder, func, args, kwargs)

    def size_value(self, size):
        """A symbolic size as the Python int it is when the code runs: a weak 0-d int64 tensor."""
        size = tirx.Cast("int64", size) if size.ty.dtype != "int64" else size
        value = self.emit(relax.op.reshape(relax.op.arange(size, size + 1, 1, "int64"), ()))
        return self.builder.weak(value)
