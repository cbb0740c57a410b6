"""The Relax backend: one ast.NodeVisitor that drives TVM's Relax IRBuilder.

Values while compiling are either compile-time Python values (ints, floats, bools, tuples, shape
entries) or Relax expressions (tensors). Python values fold at compile time; a Python number
meeting a tensor takes the tensor's dtype, as in torch.

RelaxCodeGen holds the driver, the emission of bindings and the values' conversions; what each kind
of node compiles to is in a module of its own, as the TVMScript parser dispatches by node kind:
relax_statements.py, relax_expressions.py, relax_arithmetic.py, relax_calls.py, with control flow in
control.py and loops.py (and base.py for what the TIR visitor compiles alike).
"""
from __future__ import annotations

import ast
import gc

from tvm import relax
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

from ..frontend import devices
from ..frontend.arguments import ArgSpec, Specialise
from ..core.errors import CompilationError, Diagnostic, debug_enabled, quiet_tvm
from ..frontend.source import ParsedFunction
from ..core.types import is_float_dtype
from . import library, semantic
from .base import CodeGenerator
from .control import Flow
from .loops import Loops
from .relax_arithmetic import RelaxArithmetic
from .relax_calls import RelaxCalls
from .relax_expressions import RelaxExpressions
from .relax_statements import RelaxStatements
from .values import describe, dtype_of, is_python_scalar, is_symbolic, is_tensor, round_float, wrap_int

__all__ = ["RelaxCodeGen", "quiet_tvm"]  # quiet_tvm: backends/relax.py takes it from here


def _drop_frames(error: BaseException) -> None:
    """Forget the frames an error and the exceptions chained to it were raised through."""
    while error is not None:
        error.__traceback__ = None
        chained, error.__context__, error.__cause__ = error.__context__ or error.__cause__, None, None
        error = chained


class RelaxCodeGen(RelaxStatements, RelaxExpressions, RelaxArithmetic, RelaxCalls, CodeGenerator):
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
