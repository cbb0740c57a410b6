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

from tvm import relax
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic
from . import mutation
from .carried import CarriedTypes, ShapeChange, Slot
from .loop_functions import LoopFunctions
from .merge import leaves, pack, rebuild
from .scope import FlowSlot, Undefined
from .stream import (IterEnd, Jump, LoopEnd, Marker, SetName, SetTarget, Stream, assigned_names, exit_keys,
                     loaded_names)
from .values import describe, dtype_of, is_symbolic, is_tensor


def needs_passing(value) -> bool:
    """Whether a value read inside a loop function must come in as an argument (or its sizes)."""
    return any(isinstance(leaf, relax.Expr) for leaf in leaves(value))


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


class RecursiveLoop(CarriedTypes, LoopFunctions):
    """One loop compiled as recursive Relax functions (see the module docstring); the types of what it
    carries are settled in carried.py, its functions declared in loop_functions.py."""

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
