"""The types of the variables a recursive loop carries (loops.py): what a variable is before the loop,
widened until one compiled iteration leaves it of the same type (`settle`), as Python numbers become
0-d tensors when the body changes them; a change the loop cannot carry is refused in the user's terms."""
from __future__ import annotations

import gc

import torch
import tvm
from tvm import relax, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic, quiet_stderr
from ..core.types import DTYPES, TORCH_TO_NAME, format_shape
from .merge import describe_type, leaves, rebuild, same_type, same_value, structure, symbolic_vars, type_dtype
from .operators import number_dtype
from .scope import Undefined
from .values import describe, dtype_of, is_python_scalar, is_symbolic, is_tensor, scalar_kind, shape_of

INDEX = relax.TensorType([], "int64")
FLAG = relax.TensorType([], "bool")
MAX_ROUNDS = 5  # passes over a loop body to settle the types of the variables it carries


class Const:
    """A carried variable's leaf that stays a compile-time value through the loop."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Const) and same_value(self.value, other.value)


class Slot:
    """A carried variable's leaf that the loop function takes and returns, of type `ty`; `weak`
    when it is a Python number on every iteration (a 0-d tensor that promotes as one, cg.is_weak)."""

    def __init__(self, ty, weak: bool = False):
        self.ty, self.weak = ty, weak

    def __eq__(self, other):
        return isinstance(other, Slot) and same_type(self.ty, other.ty) and self.weak == other.weak


def spec_of(value, is_weak):
    if isinstance(value, tuple):
        return tuple(spec_of(v, is_weak) for v in value)
    if isinstance(value, relax.Expr) and not is_symbolic(value):
        return Slot(value.ty, is_tensor(value) and is_weak(value))
    return Const(value)


def promote_type(dtype: str, number) -> str:
    return TORCH_TO_NAME[torch.result_type(torch.empty((), dtype=DTYPES[dtype]), number)]


class ShapeChange(Diagnostic):
    """A carried number that becomes a tensor with dimensions: fixable by peeling an iteration."""


class CarriedTypes:
    """Settles the types of a RecursiveLoop's carried variables (a mixin: it uses the loop's names,
    its visitor and `iteration`)."""

    def settle(self) -> dict:
        """Compile the body on trial until the carried variables' types stop changing.

        A variable that is a Python number before the loop stays one if the body leaves it unchanged;
        otherwise it becomes a 0-d tensor, as the values of both paths of an `if` do."""
        specs = {name: spec_of(self.cg.scope.lookup(name), self.cg.is_weak) for name in self.carried}
        for _ in range(MAX_ROUNDS):
            end = self.trial(specs)
            settled = {name: self.unify(name, specs[name], end[name]) for name in self.carried}
            if all(leaves(settled[n]) == leaves(specs[n]) for n in self.carried):
                return specs
            specs = settled
        raise Diagnostic("the types of this loop's variables keep changing from one iteration to the next")

    def trial(self, specs: dict) -> dict:
        """One iteration compiled in a scratch module that is thrown away: only its types matter."""
        saved = self.flow.loop_count
        scratch = IRBuilder()
        try:
            with scratch, I.ir_module(), RB.function():
                RB.func_name("trial")
                lo = RB.arg("lo", INDEX)
                self.cg.params.add(lo)
                self.trial_sizes(specs)
                carried = {}
                for name in self.carried:
                    args = (self.weakened(RB.arg(name, s.ty), s.weak) if isinstance(s, Slot) else s.value
                            for s in leaves(specs[name]))
                    carried[name] = rebuild(specs[name], args)
                    self.cg.params.update(a for a in leaves(carried[name]) if isinstance(a, relax.Var))
                end = self.iteration(lo, carried, None)
                RB.func_ret_value(relax.Tuple([]))
        except BaseException:
            with quiet_stderr():  # an abandoned builder warns from C++ when freed
                del scratch
                gc.collect()
            raise
        finally:
            self.flow.loop_count = saved
        return end

    def trial_sizes(self, specs: dict) -> None:
        """Declare the sizes that the carried types use but no carried tensor has as a dimension of its
        own (`2 * n`), as the loop functions do: an `If` in the body would otherwise erase the shapes
        built on them to unknown ones, as sizes not defined in the function."""
        types = [s.ty for name in self.carried for s in leaves(specs[name]) if isinstance(s, Slot)]
        dims = [d for ty in types if isinstance(ty, relax.TensorType) for d in ty.shape.values]
        bare = [d for d in dims if isinstance(d, tvm.ir.Var)]
        unbound = [v for v in symbolic_vars([d for d in dims if not isinstance(d, tirx.IntImm)])
                   if not any(v.same_as(d) for d in bare)]
        if unbound:
            RB.arg("sizes", relax.ShapeType(unbound))

    def unify(self, name: str, spec, end):
        if isinstance(end, Undefined):
            raise Diagnostic(end.message)
        if structure(spec) != structure(end):
            raise Diagnostic(f"'{name}' is {describe(rebuild(spec, iter(leaves(end))))} before the loop on line "
                             f"{self.line} and {describe(end)} after an iteration; a loop must keep each "
                             "variable's kind of value")
        return rebuild(spec, (self.unify_leaf(name, s, e) for s, e in zip(leaves(spec), leaves(end))))

    def unify_leaf(self, name: str, spec, end):
        """The type a carried leaf needs so that `end` (its value after an iteration) fits it too."""
        loop = f"the loop on line {self.line}, compiled as a recursive function ({self.reason})"
        if isinstance(spec, Const):
            start = spec.value
            if same_value(start, end):
                return spec
            if is_python_scalar(start) and is_python_scalar(end):
                return Slot(relax.TensorType([], number_dtype(scalar_kind(start), scalar_kind(end))), weak=True)
            if is_python_scalar(start) and is_tensor(end):
                if end.ty.ndim == 0 and self.cg.is_weak(end):  # still a Python number
                    return Slot(relax.TensorType([], number_dtype(scalar_kind(start), dtype_of(end))), weak=True)
                if end.ty.ndim == 0:
                    return Slot(relax.TensorType([], promote_type(dtype_of(end), start)))
                raise ShapeChange(f"'{name}' starts as the number {start!r} and becomes {describe(end)} in {loop}; "
                                 f"a variable it carries keeps one shape: start '{name}' as a tensor of that "
                                 f"shape (e.g. `{name} = x * 0`)")
            raise Diagnostic(f"'{name}' is {describe(start)} before {loop} and {describe(end)} after an "
                             "iteration; only tensors and numbers can change in such a loop")
        ty = spec.ty
        if is_python_scalar(end):
            if isinstance(ty, relax.TensorType) and ty.ndim == 0 and spec.weak:
                return Slot(relax.TensorType([], number_dtype(type_dtype(ty), scalar_kind(end))), weak=True)
            if isinstance(ty, relax.TensorType) and ty.ndim == 0:
                return Slot(relax.TensorType([], promote_type(type_dtype(ty), end)))
        elif is_tensor(end) and isinstance(ty, relax.TensorType):
            weak = spec.weak and self.cg.is_weak(end)
            if dtype_of(end) != type_dtype(ty):
                raise Diagnostic(f"'{name}' changes from {describe_type(ty)} to {describe(end)} in {loop}; a "
                                 "carried variable keeps one dtype (convert with .astype())")
            if not same_type(end.ty.shape, ty.shape):
                raise Diagnostic(f"'{name}' changes shape from {format_shape(self.shape(ty))} to "
                                 f"{format_shape(shape_of(end))} from one iteration to the next of {loop}; "
                                 "a carried variable keeps one shape")
            return spec if weak == spec.weak else Slot(ty, weak)
        elif isinstance(end, relax.Expr) and same_type(end.ty, ty):
            return spec
        raise Diagnostic(f"'{name}' changes from {describe_type(ty)} to {describe(end)} in {loop}")

    @staticmethod
    def shape(ty) -> tuple:
        return tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in ty.shape.values)

    def slots(self, specs) -> list:
        """(name, type) of each carried leaf that the loop function takes and returns."""
        return [(name, s.ty) for name in self.carried for s in leaves(specs[name]) if isinstance(s, Slot)]

    def initial(self, specs) -> list:
        """The carried slots' values before the loop, as their types."""
        values = []
        for name in self.carried:
            for s, value in zip(leaves(specs[name]), leaves(self.cg.scope.lookup(name))):
                if isinstance(s, Slot):
                    values.append(self.flow.coerce(value, s.ty))
        return values
