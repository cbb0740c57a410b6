"""The Relax functions of a recursive loop (loops.py): the body (one iteration, where FuseOps can fuse it),
the halves that run iterations lo .. hi-1 by halving the range, and a `while` loop's driver that runs
chunks of 1, 2, 4, ... iterations; each declared with its own symbolic sizes."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder.ir.frame import IRModuleFrame
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic
from .carried import FLAG, INDEX, Const, Slot
from .merge import leaves, pack, rebuild, same_value, symbolic_vars
from .scope import FlowSlot
from .values import is_symbolic, is_tensor

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


class LoopFunctions:
    """Declares a RecursiveLoop's functions (a mixin: it uses the loop's names, settled types, visitor and
    `iteration`)."""

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
        impure_if_it_can_raise(name, gv)

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


def impure_if_it_can_raise(name: str, gv) -> None:
    """Declare the loop function `gv` impure when its body can raise (a run-time check, or a call of
    a function that can): a call of a pure function whose result is unused is dead code, and
    DeadCodeElimination would remove the check with it. One that cannot raise stays pure, so an
    unused loop is still removed. The functions a body calls are settled before it (a nested loop's
    before the body that calls it), and its recursive calls of itself add nothing."""
    frame = next(f for f in reversed(list(IRBuilder.current().frames)) if isinstance(f, IRModuleFrame))
    fn = frame.functions[gv]
    if fn.is_pure and relax.analysis.contains_impure_call(fn.body, gv):
        # redefining it updates the GlobalVar's type too, which is what its calls' purity is read from
        I.def_function(name, relax.Function(fn.params, fn.body, fn.ret_ty, False, fn.attrs, fn.span))


def subst_value(value, subst):
    return subst(value) if is_symbolic(value) else value
