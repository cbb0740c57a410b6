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

TIRCodeGen holds the driver and the conversions of scalar values; what each kind of node compiles to
is in a module of its own, as the TVMScript parser dispatches by node kind: tir_statements.py,
tir_control.py, tir_expressions.py, tir_calls.py, with the values they share in tir_values.py (and
base.py for what the Relax visitor compiles alike).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder

from ..frontend.arguments import ArgSpec
from ..core.errors import Diagnostic
from ..core.types import is_float_dtype
from .base import CodeGenerator
from .scope import Scope
from ..frontend.source import ParsedFunction
from .tir_calls import TIRCalls
from .tir_control import TIRControl
from .tir_expressions import TIRExpressions
from .tir_statements import TIRStatements
from .tir_values import (INT64, Loop, Note, TensorParam, describe, dtype_of, is_expr, join, kind_of, parallel,
                         storage_dtype)
from .values import PY_SCALARS, round_float

__all__ = ["TIRCodeGen", "parallel"]  # parallel: bt.parallel

MAX_PASSES = 8


class TIRCodeGen(TIRStatements, TIRControl, TIRExpressions, TIRCalls, CodeGenerator):
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

    def index_expr(self, value):
        return tirx.IntImm(INT64, value) if isinstance(value, int) else self.cast(value, INT64)

    def line(self, relative: int) -> int:
        return self.parsed.source_map.file_line(relative)
