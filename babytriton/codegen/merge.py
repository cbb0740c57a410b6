"""The two paths of a run-time `if`, merged for the Relax visitor's control flow (control.py): one Relax
`If` yields every variable the branches assign (and the control-flow slots), merged by the rules of
`a if c else b`; names defined on one path only become Undefined, and say so when read."""
from __future__ import annotations

import tvm_ffi
from tvm import relax, tirx
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic, PathDependent
from ..core.types import format_shape
from . import mutation
from .operators import number_dtype
from .scope import FlowSlot, Undefined
from .stream import NO_RETURN, RETURN, FunctionEnd
from .values import describe, dtype_of, is_python_scalar, is_symbolic, is_tensor, promote, scalar_kind, shape_of

MISSING = object()        # a name not defined on a path


def leaves(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def rebuild(template, values):
    """`template` with its leaves replaced, in order, by `values` (an iterator)."""
    if isinstance(template, tuple):
        return tuple(rebuild(t, values) for t in template)
    return next(values)


def structure(value):
    return tuple(structure(v) for v in value) if isinstance(value, tuple) else None


def same_value(a, b) -> bool:
    if a is b:
        return True
    if is_symbolic(a) and is_symbolic(b):
        return tvm_ffi.structural_equal(a, b)
    if isinstance(a, relax.Expr) or isinstance(b, relax.Expr):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable ==
        return False


def type_dtype(ty) -> str:
    """A TensorType's dtype as a name ("float32")."""
    return str(ty.dtype)


def describe_type(ty) -> str:
    if isinstance(ty, relax.TensorType):
        shape = tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in ty.shape.values)
        return f"a {type_dtype(ty)} tensor of shape {format_shape(shape)}"
    return str(ty)


def same_type(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b)


def symbolic_vars(exprs) -> list:
    found = []
    for expr in exprs:
        for var in tirx.analysis.undefined_vars(expr):
            if not any(var.same_as(v) for v in found):
                found.append(var)
    return found


class Merging:
    """The merge of a run-time `if`'s two paths, and the Relax `If`s control flow emits (a mixin of
    control.Flow: it uses the flow's visitor, pending exits and the recursive loops being compiled)."""

    def live_names(self, boundary):
        """The names that matter where the branches end (None: all of them)."""
        if boundary == FunctionEnd.key:  # and the parameters updated in place, written back (mutation.py)
            return {RETURN, *mutation.candidates(self.cg)}
        if boundary is not None and boundary[0] == "break" and boundary[1] in self.leaves:
            return self.leaves[boundary[1]].live | set(self.pending)
        return None

    def outer(self, name):
        scope = self.cg.scope
        if name in scope:
            return scope.lookup(name)
        return False if name in self.pending else MISSING

    def merge(self, node, cond, then, els, boundary):
        """After a run-time `if`: one `If` yielding what differs between the two paths."""
        (then_names, then_seq), (else_names, else_seq) = then, els
        live = self.live_names(boundary)
        names = [n for n in dict.fromkeys([*then_names, *else_names]) if live is None or n in live]
        slots, plans, shared = [], {}, {}
        for name in names:
            a = then_names[name] if name in then_names else self.outer(name)
            b = else_names[name] if name in else_names else self.outer(name)
            if name == RETURN and boundary == FunctionEnd.key:
                a, b = self.returns(node, a, b)
            if a is b:  # both paths hold one value (maybe a new name for an outer one: `v = x ** 1`)
                plans[name] = (a, [("same", leaf) for leaf in leaves(a)])
                continue
            if a is MISSING or b is MISSING or isinstance(a, Undefined) or isinstance(b, Undefined):
                plans[name] = self.undefined_after_if(node, name, a, b)
                continue
            if structure(a) != structure(b):
                raise Diagnostic(f"{self.display(name)} is {describe(a)} on one path of this `if` and "
                                 f"{describe(b)} on the other; both paths must give it the same kind of value")
            parts = []
            for x, y in zip(leaves(a), leaves(b)):
                ty = self.merged_type(name, x, y)
                if ty is None:
                    parts.append(("same", x))
                elif x is True and y is False and is_tensor(cond):
                    parts.append(("same", cond))  # a flag that is the condition itself
                elif (id(x), id(y)) in shared:  # names bound to one tensor on both paths stay so (`y = x`)
                    parts.append(("slot", shared[id(x), id(y)]))
                else:
                    shared[id(x), id(y)] = len(slots)
                    parts.append(("slot", len(slots)))
                    slots.append((name, ty, x, y))
            plans[name] = (a, parts)
        outs = self.emit_merge(cond, slots, then_seq, else_seq)
        for k, (_, _, x, y) in enumerate(slots):  # a Python number on both paths stays one
            if self.cg.is_weak(x) and self.cg.is_weak(y):
                self.cg.weak.append(outs[k])
        for name, plan in plans.items():
            if isinstance(plan, Undefined):
                value = plan
            else:
                template, parts = plan
                value = rebuild(template, iter([v if kind == "same" else outs[v] for kind, v in parts]))
            self.set(name, value)

    def emit_merge(self, cond, slots, then_seq, else_seq) -> list:
        if not slots:
            return []
        with RB.SeqExpr() as then_fix:
            then_out = [self.coerce(x, ty) for _, ty, x, _ in slots]
        with RB.SeqExpr() as else_fix:
            else_out = [self.coerce(y, ty) for _, ty, _, y in slots]

        then_branch = branch([*then_seq.binding_blocks, *then_fix.binding_blocks], pack(then_out))
        else_branch = branch([*else_seq.binding_blocks, *else_fix.binding_blocks], pack(else_out))
        var = self.cg.emit(relax.If(cond, then_branch, else_branch))
        names = list(dict.fromkeys(self.display(name, quoted=False) for name, *_ in slots))
        self.cg.ib.name("_".join(names[:3]) + ("_etc" if len(names) > 3 else ""), var)
        return self.unpack(var, len(slots))

    def unpack(self, value, count: int, wanted=None) -> list:
        """The parts of a value that packs `count` (emitting only the `wanted` indices; None elsewhere)."""
        if count == 1:
            return [value]
        return [self.cg.emit(relax.TupleGetItem(value, k)) if wanted is None or k in wanted else None
                for k in range(count)]

    def set(self, name: str | FlowSlot, value):
        if isinstance(name, FlowSlot):
            self.cg.scope.assign(name, value)
        else:
            self.cg.bind(name, value)

    def display(self, name: str | FlowSlot, quoted: bool = True) -> str:
        """How a name or slot is called in messages (quoted) and in the IR."""
        if isinstance(name, FlowSlot):
            return name.describe() if quoted else name.label
        return f"'{name}'" if quoted else name

    def returns(self, node, a, b):
        """At the end of the function, a path that did not return returns None."""
        a, b = (None if v is NO_RETURN else v for v in (a, b))
        if (a is None) != (b is None):
            where = "the `if` branch" if b is None else "the `else` path"
            raise Diagnostic(f"not every path returns a value: after this `if` (decided at run time), "
                             f"{where} reaches the end of the function without `return`; add a `return` "
                             "there (a @jit function returns the same kind of value on every path)")
        return (a, a) if a is None else (a, b)

    def undefined_after_if(self, node, name, a, b) -> Undefined:
        if isinstance(a, Undefined) and not isinstance(b, Undefined):
            return a
        if isinstance(b, Undefined):
            return b
        where = "in its `if` branch" if b is MISSING else "in its `else` branch"
        return Undefined(f"'{name}' is not defined on every path to here: the `if` on line {self.line(node)} "
                         f"is decided at run time and assigns '{name}' only {where}; assign '{name}' "
                         "before that `if` or on both of its paths")

    def merged_type(self, name: str, a, b):
        """None when the paths agree on a compile-time value, else the type of the merged value."""
        what = self.display(name)
        if not is_tensor(a) and not is_tensor(b):
            if isinstance(a, relax.Expr) and isinstance(b, relax.Expr) and not is_symbolic(a) \
                    and not is_symbolic(b) and same_type(a.ty, b.ty):
                return a.ty
            if same_value(a, b):
                return None
            if is_python_scalar(a) and is_python_scalar(b):
                return relax.TensorType([], number_dtype(scalar_kind(a), scalar_kind(b)))
            raise Diagnostic(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the "
                             "other; only tensors and numbers can differ between paths chosen at run time")
        if is_tensor(a) and is_tensor(b):
            if dtype_of(a) != dtype_of(b):
                raise PathDependent(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the "
                                    "other; both paths must give it one dtype (convert one with .astype())")
            if not same_type(a.ty.shape, b.ty.shape):
                raise Diagnostic(f"{what} has shape {format_shape(shape_of(a))} on one path of this `if` "
                                 f"and {format_shape(shape_of(b))} on the other; both paths must give it one shape")
            return a.ty
        tensor, other = (a, b) if is_tensor(a) else (b, a)
        if not is_python_scalar(other):
            raise Diagnostic(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the other")
        if tensor.ty.ndim != 0:
            raise Diagnostic(f"{what} is {describe(tensor)} on one path of this `if` and the number "
                             f"{other!r} on the other; both paths must give it one shape")
        if self.cg.is_weak(tensor):  # a run-time scalar on one path, a number on the other
            return relax.TensorType([], number_dtype(dtype_of(tensor), scalar_kind(other)))
        return relax.TensorType([], promote(tensor, other))

    def coerce(self, value, ty):
        """A value as the merged type: numbers become constants, tensors are converted if needed."""
        if not isinstance(ty, relax.TensorType):
            return value
        if is_python_scalar(value):
            return self.cg.const(value, type_dtype(ty))
        if is_tensor(value) and dtype_of(value) != type_dtype(ty):
            return self.cg.emit(relax.op.astype(value, type_dtype(ty)))
        return value

    def emit_if(self, cond, then_fn, else_fn, name: str):
        """An `If` whose branches the callbacks build, each returning its value."""
        with RB.SeqExpr() as then_seq:
            then_value = then_fn()
        with RB.SeqExpr() as else_seq:
            else_value = else_fn()
        var = self.cg.emit(relax.If(cond, branch(then_seq.binding_blocks, then_value),
                                    branch(else_seq.binding_blocks, else_value)))
        return self.cg.ib.name(name, var)


def branch(blocks, result) -> relax.SeqExpr:
    """One branch of an `If`, without the pure bindings its result does not need (run-time checks
    stay). Besides tidier IR: TVM's FuseOps fails on a binding nothing uses inside an `If` branch."""
    live = set(relax.analysis.free_vars(result))
    kept_blocks = []
    for block in reversed(list(blocks)):
        kept = []
        for binding in reversed(list(block.bindings)):
            if binding.var in live or relax.analysis.contains_impure_call(binding.value):
                kept.append(binding)
                live.update(relax.analysis.free_vars(binding.value))
        if kept:
            kept_blocks.append(type(block)(kept[::-1]))
    return relax.SeqExpr(kept_blocks[::-1], result)


def pack(values: list):
    return values[0] if len(values) == 1 else relax.Tuple(values)
