"""Loops for the Relax backend: unrolled, or compiled as recursive Relax functions.

A `for i in range(...)` whose trip count is known at compile time and at most the jit option `unroll`
(and any loop over a tuple) is unrolled: its iterations are spliced into the stream, `i` a Python
int in each. Every other loop becomes a recursive Relax function that carries the variables its body
reassigns, and takes the tensors the body reads as arguments:

    f_loop0(lo, hi, <carried>, <inputs>) runs iterations lo .. hi-1 and returns <carried>:
        if lo + 1 == hi: f_loop0_body(lo, <carried>, <inputs>), the body once, i = start + lo * step
        else:            f_loop0(lo, mid, ...), then f_loop0(mid, hi, ...) on its results

Halving the range keeps the VM's call depth at log2(trip count): the Relax VM recurses on the C++
stack, and one nested call per iteration overflows it (a segfault) after a few thousand iterations.
The body is a function of its own because FuseOps fuses operators only at a function's top level.
A `while` loop runs chunks of 1, 2, 4, ... iterations through such a function until its condition
fails (`f_loop0_grow`); `break` stops the halves through a flag the functions also return.
"""
from __future__ import annotations

import ast
import gc
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic, quiet_stderr
from ..core.types import DTYPES, TORCH_TO_NAME, format_shape
from .control import (Jump, LoopEnd, IterEnd, Marker, SetName, SetTarget, Stream, assigned_names,
                      describe_type, exit_keys, leaves, loaded_names, pack, rebuild, same_type, same_value,
                      structure, symbolic_vars, type_dtype)
from .operators import number_dtype
from . import mutation
from .scope import FlowSlot, Undefined
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


def needs_passing(value) -> bool:
    """Whether a value read inside a loop function must come in as an argument (or its sizes)."""
    return any(isinstance(leaf, relax.Expr) for leaf in leaves(value))


def promote_type(dtype: str, number) -> str:
    return TORCH_TO_NAME[torch.result_type(torch.empty((), dtype=DTYPES[dtype]), number)]


class WhileGuard(Marker):
    """First step of a `while` loop's iteration: stop when the condition fails."""

    def __init__(self, loop: "RecursiveLoop"):
        self.loop, self.node = loop, loop.node

    def run(self, flow):
        self.loop.guard()


class WhileTest(Marker):
    """An unrolled `while` iteration: test the condition, splice in the next iteration."""

    def __init__(self, loops: "Loops", node, count: int):
        self.loops, self.node, self.count = loops, node, count

    def run(self, flow):
        self.loops.while_test(self.node, self.count)


class RangeRest(Marker):
    """The iterations of a peeled `for` loop after its first."""

    def __init__(self, loops: "Loops", node, start: int, stop: int, step: int):
        self.loops, self.node, self.bounds = loops, node, (start, stop, step)

    def run(self, flow):
        self.loops.for_range(self.node, *self.bounds)


class ShapeChange(Diagnostic):
    """A carried number that becomes a tensor with dimensions: fixable by peeling an iteration."""


class Loops:
    """`for` and `while` for one RelaxCodeGen, on its Flow."""

    def __init__(self, flow):
        self.flow = flow
        self.cg = flow.cg

    @property
    def unroll(self) -> int:
        return self.cg.options.unroll

    def visit_for(self, node: ast.For):
        bounds = self.range_bounds(node)
        if bounds is None:
            items = self.cg.visit(node.iter)
            if isinstance(items, tuple):
                self.unrolled(node, list(items))
                return
            if is_tensor(items):
                raise Diagnostic("iterating over a tensor is not supported in @jit functions; loop over "
                                 "indices instead, e.g. `for i in range(n)`")
            raise Diagnostic(f"cannot loop over {describe(items)}; a @jit `for` runs over range(...) or a tuple")
        self.for_range(node, *bounds)

    def for_range(self, node: ast.For, start, stop, step: int):
        if isinstance(start, int) and isinstance(stop, int):
            count = len(range(start, stop, step))
            if count <= self.unroll:
                self.unrolled(node, list(range(start, stop, step)))
                return
            loop = RecursiveLoop(self, node, f"its trip count {count} is above unroll={self.unroll}")
            if loop.needs_peeling():
                self.peeled(node, start, stop, step)
                return
            try:
                loop.lower_for(start, stop, step)
            except ShapeChange:  # e.g. `acc = 0` becoming a vector: its first iteration settles it
                self.peeled(node, start, stop, step)
            return
        RecursiveLoop(self, node, "its trip count is only known at run time").lower_for(start, stop, step)

    def peeled(self, node: ast.For, start: int, stop: int, step: int):
        """Run the first iteration unrolled, the rest as a loop: as Python would, the first iteration
        defines what the body assigns and fixes the shapes of what it changes."""
        self.flow.stream.splice([SetTarget(node, start), *node.body, IterEnd(node),
                                 RangeRest(self, node, start + step, stop, step), LoopEnd(node)])

    def unrolled(self, node: ast.For, values: list):
        items = []
        for value in values:
            items += [SetTarget(node, value), *node.body, IterEnd(node)]
        self.flow.stream.splice([*items, *node.orelse, LoopEnd(node)])

    def range_bounds(self, node: ast.For):
        """(start, stop, step) of `for ... in range(...)`, or None for another iterable."""
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
            return None
        if "range" in self.cg.scope or self.cg.py_names.get("range", range) is not range:
            return None
        if call.keywords or not 1 <= len(call.args) <= 3:
            raise Diagnostic("range() takes 1 to 3 positional arguments")
        args = [self.index(arg) for arg in call.args]
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1) if len(args) == 2 else args
        if not isinstance(step, int):
            raise self.cg.error(call.args[2], f"the step of range() must be a compile-time int, got "
                                              f"{describe(step)}")
        if step == 0:
            raise self.cg.error(call.args[2], "the step of range() must not be zero")
        return start, stop, step

    def index(self, node: ast.expr):
        """A range() argument: a Python int, a symbolic size, or a 0-d int64 tensor."""
        value = self.cg.visit(node)
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int) or is_symbolic(value) and str(value.ty.dtype).startswith("int"):
            return value
        if is_tensor(value) and value.ty.ndim == 0 and dtype_of(value).startswith(("int", "uint", "bool")):
            return value if dtype_of(value) == "int64" else self.cg.emit(relax.op.astype(value, "int64"))
        raise self.cg.error(node, f"range() needs integers, got {describe(value)}")

    def visit_while(self, node: ast.While):
        self.flow.stream.splice([WhileTest(self, node, 0), LoopEnd(node)])

    def while_test(self, node: ast.While, count: int):
        with RB.SeqExpr():  # only a probe: a run-time condition is computed again inside the loop
            cond = self.cg.visit(node.test)
        holds = self.flow.decide(cond, "a `while`")
        if holds is False:
            self.flow.stream.splice(node.orelse)
        elif holds and count < self.unroll:
            self.flow.stream.splice([*node.body, IterEnd(node), WhileTest(self, node, count + 1)])
        else:
            reason = ("its condition is decided at run time" if holds is None
                      else f"it runs more than unroll={self.unroll} iterations")
            RecursiveLoop(self, node, reason).lower_while()


@dataclass
class LoopFunction:
    """A loop function being built: its GlobalVar, its size substitution and its parameters."""
    gv: object
    subst: object
    head: list
    shape: list
    slots: list
    passed: list
    count: int  # how many values it returns


class RecursiveLoop:
    """One loop compiled as recursive Relax functions (see the module docstring)."""

    def __init__(self, loops: Loops, node, reason: str):
        self.flow, self.cg, self.node, self.reason = loops.flow, loops.cg, node, reason
        self.is_for = isinstance(node, ast.For)
        scope = self.cg.scope
        targets = assigned_names([node.target]) if self.is_for else []
        assigned = list(dict.fromkeys(targets + assigned_names(node.body) + mutation.mutated(self.cg, node.body)))

        def defined(name):
            return name in scope and not isinstance(scope.lookup(name), Undefined)
        self.carried = [n for n in assigned if defined(n)]
        self.locals = [n for n in assigned if not defined(n)]
        read = loaded_names(node.body if self.is_for else [*node.body, node.test])
        self.inputs = [n for n in read if n not in assigned and defined(n) and needs_passing(scope.lookup(n))]
        has_break = ("break", node) in exit_keys(node.body, self.flow.owners)
        self.has_break = has_break
        self.broke = FlowSlot("broke", node) if has_break and (self.is_for or node.orelse) else None
        self.done = None if self.is_for else FlowSlot("done", node)
        self.stop = self.done or self.broke            # the flag that ends the halves early
        self.flags = [f for f in (self.done, self.broke) if f]
        self.on_break = [(f, True) for f in self.flags]
        self.start = self.step = None
        self.final = False
        # What `declare` settles for the loop's functions:
        self.name: str | None = None     # their name (f_loop0), which the body's and the halves' extend
        self.passed: list = []           # (name, tensor): what a call passes after the carried values
        self.symbols: list = []          # the symbolic sizes in their parameters' types
        self.unbound: list = []          # those no tensor parameter has as a dimension of its own
        self.slot_types: list = []       # the carried slots' types
        self.slot_names: list = []       # and their parameters' names

    @property
    def line(self) -> int:
        return self.flow.line(self.node)

    def needs_peeling(self) -> bool:
        """Whether code outside the loop reads a name that only the loop's body assigns."""
        if not self.locals:
            return False
        outside = set()
        stack = [(self.cg.parsed.tree, frozenset())]
        while stack:
            item, bound = stack.pop()
            if item is self.node:
                continue
            if isinstance(item, ast.Name) and isinstance(item.ctx, ast.Load) and item.id not in bound:
                outside.add(item.id)
            if isinstance(item, ast.For):  # another loop that binds the name reads its own value
                bound = bound | set(assigned_names([item.target]))
            stack.extend((child, bound) for child in ast.iter_child_nodes(item))
        return bool(outside & set(self.locals))

    # ------------------------------------------------------------------------------------------
    # the two kinds of loop
    # ------------------------------------------------------------------------------------------
    def lower_for(self, start, stop, step):
        cg = self.cg
        self.start, self.step = self.as_tensor(start), step
        if isinstance(start, int) and isinstance(stop, int):
            trips = len(range(start, stop, step))
        else:
            stop = self.as_tensor(stop)
            if step > 0:
                ahead = stop if isinstance(start, int) and start == 0 else cg.binary(ast.Sub(), stop, self.start)
            else:
                ahead = cg.binary(ast.Sub(), self.start, stop)
            if abs(step) != 1:
                ahead = cg.binary(ast.FloorDiv(), cg.binary(ast.Add(), ahead, abs(step) - 1), abs(step))
            trips = cg.ib.name("trips", cg.emit(relax.op.maximum(ahead, cg.const(0, "int64"))))
        specs = self.settle()
        slots = self.slots(specs)
        if not slots:
            self.after(specs, [], trips)  # the body changes nothing that outlives an iteration
            return
        fn, shape, passed = self.declare(specs, slots)

        def call():
            return cg.emit(relax.Call(fn, [cg.const(0, "int64"), cg.as_tensor(trips, "int64"), *shape,
                                           *self.initial(specs), *passed]))
        if isinstance(trips, int):
            out = call()
        else:
            runs = cg.ib.name("runs", cg.emit(relax.op.greater(trips, cg.const(0, "int64"))))
            out = self.flow.emit_if(runs, call, lambda: pack([*self.initial(specs),
                                                               *[cg.const(False)] * len(self.flags)]),
                                    self.out_name())
        wanted = {*range(len(slots)), len(slots) + len(self.flags) - 1 if self.broke and self.node.orelse else None}
        self.after(specs, self.flow.unpack(out, len(slots) + len(self.flags), wanted), trips)

    def lower_while(self):
        cg = self.cg
        specs = self.settle()
        slots = self.slots(specs)
        if not slots and not self.broke:
            if not self.has_break:
                raise Diagnostic("this `while` loop changes no variable, so its condition cannot change: it "
                                 "would run never or forever")
            self.after(specs, [], None)  # it only decides when to stop, which changes nothing
            return
        chunk, shape, passed = self.declare(specs, slots)
        grow = self.declare_grow(chunk)
        out = cg.emit(relax.Call(grow, [cg.const(1, "int64"), *shape, *self.initial(specs), *passed]))
        count = len(slots) + (1 if self.broke else 0)
        self.after(specs, self.flow.unpack(out, count) if count else [], None)

    def after(self, specs, outs: list, trips):
        """Back in the calling function: rebind the carried names, then run the loop's `else`."""
        flow, scope, outs = self.flow, self.cg.scope, list(outs)
        values = iter(outs)
        for name in self.carried:
            flow.set(name, rebuild(specs[name], (self.weakened(next(values), s.weak) if isinstance(s, Slot)
                                                 else s.value for s in leaves(specs[name]))))
        for name in self.locals:
            scope.assign(name, Undefined(
                f"'{name}' is assigned only inside the loop on line {self.line}, which is compiled as a recursive "
                f"function ({self.reason}); a variable first assigned inside such a loop is not available "
                f"after it. Assign '{name}' before the loop."))
        if self.is_for and isinstance(self.node.target, ast.Name) and self.node.target.id in self.locals \
                and isinstance(trips, int) and isinstance(self.start, int) and not self.has_break:
            scope.assign(self.node.target.id, self.start + (trips - 1) * self.step)  # as Python leaves it
        if self.node.orelse:
            if self.broke:
                flow.branch(self.node, self.cg.emit(relax.op.logical_not(outs[-1])), self.node.orelse, [])
            else:
                flow.stream.splice(self.node.orelse)

    # ------------------------------------------------------------------------------------------
    # one iteration
    # ------------------------------------------------------------------------------------------
    def iteration(self, lo, carried: dict, inputs: dict | None) -> dict:
        """Compile the body once in the current function; the carried names' values at its end."""
        cg, flow, scope = self.cg, self.flow, self.cg.scope
        with scope.frame():
            for name, value in {**(inputs or {}), **carried}.items():
                scope.assign(name, value)
            mutation.realias(scope, carried)  # names of one tensor stay one tensor (`y = x; y.add_(1)`)
            for name in self.locals:
                scope.assign(name, Undefined(
                    f"'{name}' is read before it is assigned in this iteration of the loop on line {self.line}; "
                    f"the loop is compiled as a recursive function ({self.reason}), so only variables that "
                    f"exist before it carry values from one iteration to the next. Assign '{name}' before "
                    "the loop."))
            for flag in self.flags:
                scope.assign(flag, False)
            items = [*self.node.body, IterEnd(self.node), LoopEnd(self.node)]
            if self.is_for:
                index = self.index_value(lo, inputs)
                if is_tensor(index):  # `i` is a Python int in the unrolled form: promote like one
                    cg.weak.append(index)
                cg.assign(self.node.target, index)
            else:
                items.insert(0, WhileGuard(self))
            flow.leaves[self.node] = self
            try:
                flow.run(Stream(items))
            finally:
                del flow.leaves[self.node]
            return {name: scope.lookup(name) for name in [*self.carried, *self.flags]}

    def weakened(self, value, weak: bool):
        """`value`, promoting as a Python number when `weak` (cg.is_weak)."""
        if weak:
            self.cg.weak.append(value)
        return value

    @property
    def live(self) -> set:
        return {*self.carried, *self.flags}

    def index_value(self, lo, inputs):
        """The loop variable of iteration `lo`: start + lo * step."""
        slot = FlowSlot("start", self.node)
        start = inputs[slot] if inputs and slot in inputs else self.start
        i = lo if self.step == 1 else self.cg.binary(ast.Mult(), lo, self.step)
        return i if isinstance(start, int) and start == 0 else self.cg.binary(ast.Add(), start, i)

    def guard(self):
        """A `while` iteration starts by testing the condition; a false one ends the loop."""
        flow = self.flow
        cond = self.cg.visit(self.node.test)
        holds = flow.decide(cond, "a `while`")
        stop = [SetName(self.done, True), Jump(("break", self.node))]
        if holds is None:
            flow.split(self.node, flow.condition(cond, "a `while`"), [], stop, [("break", self.node)])
        elif not holds:
            flow.stream.splice(stop)
        elif self.final and not self.has_break:
            raise Diagnostic("this `while` loop never ends: its condition is always true here and its body "
                             "has no `break`")

    # ------------------------------------------------------------------------------------------
    # the types of the carried variables
    # ------------------------------------------------------------------------------------------
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

    # ------------------------------------------------------------------------------------------
    # the functions
    # ------------------------------------------------------------------------------------------
    def declare(self, specs, slots):
        """Build the loop's functions (body and halves); return the halves' GlobalVar and the
        arguments after the carried values that a call from here passes."""
        cg, flow = self.cg, self.flow
        self.name = f"{cg.parsed.name}_loop{flow.loop_count}"
        flow.loop_count += 1
        self.final = True
        scope = cg.scope
        inputs = [(n, scope.lookup(n)) for n in self.inputs]
        if is_tensor(self.start):
            inputs.append((FlowSlot("start", self.node), self.start))
        self.passed = [(n, leaf) for n, value in inputs for leaf in leaves(value)
                       if isinstance(leaf, relax.Expr) and not is_symbolic(leaf)]
        consts = [s.value for n in self.carried for s in leaves(specs[n]) if isinstance(s, Const)]
        consts += [leaf for _, value in inputs for leaf in leaves(value) if is_symbolic(leaf)]
        types = [ty for _, ty in slots] + [leaf.ty for _, leaf in self.passed]
        sizes = [d for ty in types if isinstance(ty, relax.TensorType) for d in ty.shape.values
                 if not isinstance(d, tirx.IntImm)]
        self.symbols = symbolic_vars(sizes + [c for c in consts if is_symbolic(c)])
        bare = [d for ty in types if isinstance(ty, relax.TensorType) for d in ty.shape.values
                if isinstance(d, tvm.ir.Var)]
        # sizes no tensor argument has as a dimension of its own come in as a shape argument
        self.unbound = [v for v in self.symbols if not any(v.same_as(d) for d in bare)]
        self.slot_types = [ty for _, ty in slots]
        self.slot_names = [flow.display(n, quoted=False) for n, _ in slots]
        body = self.declare_body(specs, inputs)
        halves = self.declare_halves(body)
        return halves, self.pass_on(lambda v: v), [leaf for _, leaf in self.passed]

    def pass_on(self, subst) -> list:
        """The shape argument, if the functions take one, as the caller (with `subst`) spells it."""
        return [relax.ShapeExpr([subst(v) for v in self.unbound])] if self.unbound else []

    @contextmanager
    def function(self, name: str, head: list, flags: list):
        """Declare one loop function taking `head`, the sizes, the carried slots and the passed
        tensors, returning the slots and `flags`; build its body in the `with`. Each function gets
        its own symbolic sizes: Relax lets a size variable belong to one function only."""
        fresh = {v: tirx.Var(v.name, v.ty.dtype) for v in self.symbols}

        def subst(x):
            return tvm_ffi.structural_map(x, (tvm.ir.Var, lambda v: fresh.get(v, v)), order="post")
        params = list(head)
        if self.unbound:
            params.append(("sizes", relax.ShapeType([fresh[v] for v in self.unbound])))
        params += [(n, subst(ty)) for n, ty in zip(self.slot_names, self.slot_types)]
        params += [(self.flow.display(n, quoted=False), subst(leaf.ty)) for n, leaf in self.passed]
        outputs = [subst(ty) for ty in self.slot_types] + [FLAG] * len(flags)
        ret = outputs[0] if len(outputs) == 1 else relax.TupleType(outputs)
        gv = I.decl_function(name, relax.Function.create_empty([relax.Var(n, t) for n, t in params], ret))
        with RB.function(is_private=True):
            RB.func_name(name)
            args = [RB.arg(n, t) for n, t in params]
            self.cg.params.update(args)
            n_head, n_shape, n_slots = len(head), len(self.pass_on(subst)), len(self.slot_types)
            yield LoopFunction(gv, subst, args[:n_head], args[n_head:n_head + n_shape],
                               args[n_head + n_shape:n_head + n_shape + n_slots],
                               args[n_head + n_shape + n_slots:], len(outputs))

    def declare_body(self, specs, inputs):
        """One iteration as a function of its own: Relax fuses operators only at a function's top
        level, not inside an `If` branch, so the body keeps its fusion here."""
        cg = self.cg
        head = [("i" if self.simple_index() else "iteration", INDEX)] if self.is_for else []
        with self.function(f"{self.name}_body", head, self.flags) as f:
            values = iter(f.slots)
            carried = {n: rebuild(specs[n], (self.weakened(next(values), s.weak) if isinstance(s, Slot)
                                             else subst_value(s.value, f.subst) for s in leaves(specs[n])))
                       for n in self.carried}
            given = iter(f.passed)  # a run-time scalar passed in is still a Python number inside
            bound = {n: rebuild(v, (self.weakened(next(given), is_tensor(leaf) and cg.is_weak(leaf))
                                    if isinstance(leaf, relax.Expr) and not is_symbolic(leaf)
                                    else subst_value(leaf, f.subst) for leaf in leaves(v))) for n, v in inputs}
            end = self.iteration(f.head[0] if f.head else None, carried, bound)
            RB.func_ret_value(pack(self.outputs(specs, end, f.subst)))
        return f.gv

    def simple_index(self) -> bool:
        return isinstance(self.start, int) and self.start == 0 and self.step == 1

    def declare_halves(self, body):
        """f(lo, hi, ...): iteration lo by the body when one is left, else the two halves in turn."""
        cg, flow = self.cg, self.flow
        with self.function(self.name, [("lo", INDEX), ("hi", INDEX)], self.flags) as f:
            (lo, hi), n_slots = f.head, len(f.slots)
            # Both up front, each one fused kernel: FuseOps does not reach into an If's branches.
            one = cg.const(1, "int64")
            single = cg.ib.name("single", cg.emit(relax.op.equal(relax.op.add(lo, one), hi)))
            mid = cg.ib.name("mid", cg.emit(relax.op.floor_divide(relax.op.add(lo, hi), cg.const(2, "int64"))))

            def one():
                index = [lo] if self.is_for else []
                return cg.ib.name("step", cg.emit(relax.Call(body, [*index, *f.shape, *f.slots, *f.passed])))

            def halves():
                first = cg.ib.name("first", cg.emit(relax.Call(f.gv, [lo, mid, *f.shape, *f.slots, *f.passed])))
                stop_at = None if self.stop is None else n_slots + self.flags.index(self.stop)
                values = flow.unpack(first, f.count, {*range(n_slots), stop_at})

                def second():
                    return cg.ib.name("second", cg.emit(relax.Call(f.gv, [mid, hi, *f.shape, *values[:n_slots],
                                                                         *f.passed])))
                if self.stop is None:
                    return second()
                return flow.emit_if(values[stop_at], lambda: first, second, "rest")
            RB.func_ret_value(flow.emit_if(single, one, halves, "state"))
        return f.gv

    def declare_grow(self, chunk):
        """A `while` loop's driver: chunks of 1, 2, 4, ... iterations until the condition fails."""
        cg, flow = self.cg, self.flow
        with self.function(f"{self.name}_grow", [("size", INDEX)], [self.broke] if self.broke else []) as f:
            (size,), n_slots = f.head, len(f.slots)
            out = cg.ib.name("chunk", cg.emit(relax.Call(chunk, [cg.const(0, "int64"), size, *f.shape, *f.slots,
                                                                  *f.passed])))
            values = flow.unpack(out, n_slots + len(self.flags))
            carried, done = values[:n_slots], values[n_slots]
            result = carried + ([values[-1]] if self.broke else [])

            def more():
                bigger = cg.emit(relax.op.multiply(size, cg.const(2, "int64")))
                return cg.ib.name("more", cg.emit(relax.Call(f.gv, [bigger, *f.shape, *carried, *f.passed])))
            RB.func_ret_value(flow.emit_if(done, lambda: pack(result), more, "state"))
        return f.gv

    def outputs(self, specs, end: dict, subst) -> list:
        """An iteration's results as the function returns them: the carried slots, then the flags."""
        values = []
        for name in self.carried:
            for s, value in zip(leaves(specs[name]), leaves(end[name])):
                if isinstance(s, Slot):
                    ty = subst(s.ty)
                    self.unify_leaf(name, Slot(ty, s.weak), value)  # raises if the iteration changed its type
                    values.append(self.flow.coerce(value, ty))
                elif not same_value(subst_value(s.value, subst), value):
                    raise Diagnostic(f"'{name}' changes in the loop on line {self.line} in a way the compiler "
                                     "could not carry")
        return values + [self.flow.coerce(end[f], FLAG) for f in self.flags]

    def out_name(self) -> str:
        names = [n for n in self.carried]
        return "_".join(names[:3]) if names else "loop"

    def as_tensor(self, value):
        """A loop bound as the loop function takes it: ints stay Python ints, sizes become tensors."""
        if is_symbolic(value):
            call = RB.emit_te(lambda v: te.compute((), lambda: v, name="size"), value,
                              primfunc_name_hint="size_to_tensor")
            return self.cg.ib.name("size", self.cg.emit(call))
        return value


def subst_value(value, subst):
    return subst(value) if is_symbolic(value) else value
