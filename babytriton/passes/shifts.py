"""Shift maxima: a row max whose gradient is exactly zero, found so that the backward skips it.

Softmax, log-softmax, logsumexp and cross-entropy subtract the row max `m` only to keep `exp` in
range: their results do not change when `m` is replaced by `m + c` (for any per-row c), so the
derivative of every result with respect to `m` is zero in exact arithmetic. Differentiated op by op
(torch autograd, Relax's Gradient), that zero is computed: two more reductions over each row (the
adjoint of `m`, summed, then shared among the row's maxima) and a third pass to add it back, for a
term of float rounding size. `shift_maxima` proves the invariance by following what `m` becomes
through the function, and `detach` gives those maxima `no_grad` inputs before Gradient runs.

The proof tracks each value that depends on `m` as `value(m + c) = value(m) + k*c` ("add", k) or
`value(m) * exp(k*c)` ("mul", k), through the few ops softmax-like code is written with; a value
whose k reaches 0 is invariant. Any other use of a tracked value (a result, a comparison, a scale
inside the exp) leaves that max alone, so the gradient is then torch's rule, as before.
"""
from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.op.grad import no_grad

from ..operators import legalize
from ..core.types import is_float_dtype

_ADDITIVE = {"relax.add": 1, "relax.subtract": -1}
_MULTIPLICATIVE = {"relax.multiply": 1, "relax.divide": -1}
_SAME = ("relax.astype",)   # converts between float dtypes keep the relation (exact in the reals)


def _op(value) -> str | None:
    return value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else None


def _axes(call, ndim: int) -> tuple[int, ...]:
    return tuple(legalize._axes(call.attrs.axis, ndim))


def _ndim(expr) -> int | None:
    ty = expr.ty
    return ty.ndim if isinstance(ty, relax.TensorType) and ty.ndim >= 0 else None


class _Track:
    """How a value depends on the shift c of one max: kind "add" or "mul", coefficient k, and whether
    the reduced axes are still there (`kept`: size 1 or full) or were dropped."""

    def __init__(self, kind: str, k: int, kept: bool):
        self.kind, self.k, self.kept = kind, k, kept


def _follow(binding, tracks: dict, axes: tuple[int, ...], full: int):
    """The track of `binding`'s value given the tracks of the values it reads; None when the value
    is invariant (or does not read a tracked one); False when the relation is lost."""
    value = binding.value
    name = _op(value)
    if name is None:
        return False
    args = list(value.args)
    if any(v in tracks for a in args if not isinstance(a, relax.Var) for v in relax.analysis.free_vars(a)):
        return False   # read inside a tuple (concat, stack, ...): an op this proof does not follow
    read = [tracks.get(a) if isinstance(a, relax.Var) else None for a in args]
    if not any(read):
        return None
    out_ndim = _ndim(binding.var)
    if name in _ADDITIVE or name in _MULTIPLICATIVE:
        kind = "add" if name in _ADDITIVE else "mul"
        sign = (_ADDITIVE if kind == "add" else _MULTIPLICATIVE)[name]
        tracked = [t for t in read if t]
        if any(t.kind != kind for t in tracked) or len({t.kept for t in tracked}) != 1:
            return False
        kept = tracked[0].kept
        if out_ndim != (full if kept else full - len(axes)):  # broadcasting must not move the axes
            return False
        k = sum((t.k if t else 0) * (1 if i == 0 else sign) for i, t in enumerate(read))
        return _Track(kind, k, kept) if k else None
    track = read[0]
    if not track or any(read[1:]):
        return False
    if name == "relax.negative" and track.kind == "add":
        return _Track("add", -track.k, track.kept)
    if name == "relax.exp" and track.kind == "add":
        return _Track("mul", track.k, track.kept)
    if name == "relax.log" and track.kind == "mul":
        return _Track("add", track.k, track.kept)
    if name in _SAME and is_float_dtype(str(value.attrs.dtype)):
        return track
    if name in ("relax.sum", "relax.mean") and track.kind == "mul" and track.kept:
        summed, keepdims = _axes(value, full), bool(value.attrs.keepdims)
        if not set(summed) <= set(axes) or (not keepdims and summed != axes):  # across rows: shifts mix
            return False
        return _Track("mul", track.k, keepdims)
    if name == "relax.expand_dims" and not track.kept:
        if _ndim(binding.var) != full or tuple(sorted(int(a) % full for a in value.attrs.axis)) != axes:
            return False
        return _Track(track.kind, track.k, True)
    return False


def _invariant(fn: relax.Function, start: int, bindings: list, axes: tuple[int, ...], full: int,
               keepdims: bool) -> bool:
    """Whether every value computed from bindings[start] (a max over `axes`) ends in one that does
    not depend on the max's shift, with nothing else reading the dependent ones."""
    tracks = {bindings[start].var: _Track("add", 1, keepdims)}
    for binding in bindings[start + 1:]:
        read = [v for v in relax.analysis.free_vars(binding.value) if v in tracks]
        if not read:
            continue
        track = _follow(binding, tracks, axes, full)
        if track is False:
            return False
        if track is not None:
            tracks[binding.var] = track
    return not any(v in tracks for v in relax.analysis.free_vars(fn.body.body))


def shift_maxima(fn: relax.Function) -> list[relax.Var]:
    """The vars of `fn`'s max reductions that only shift softmax-like computations (see the module)."""
    bindings = [b for block in fn.body.blocks for b in block.bindings]
    found = []
    for i, binding in enumerate(bindings):
        value = binding.value
        if _op(value) != "relax.max" or not isinstance(binding, relax.VarBinding):
            continue
        full = _ndim(value.args[0])
        if not full or not is_float_dtype(str(value.args[0].ty.dtype)):
            continue
        if _invariant(fn, i, bindings, _axes(value, full), full, bool(value.attrs.keepdims)):
            found.append(binding.var)
    return found


@relax.expr_functor.mutator
class _Detach(relax.PyExprMutator):
    """Each listed max reads `no_grad` of its input: Gradient then sends it no adjoint."""

    def __init__(self, mod, maxima):
        super().__init__(mod)
        self.maxima = set(maxima)

    def visit_var_binding_(self, binding):
        if binding.var not in self.maxima:
            return super().visit_var_binding_(binding)
        call = binding.value
        source = self.builder_.emit(no_grad(self.visit_expr(call.args[0])), name_hint="shift_source")
        new = self.builder_.emit(relax.op.max(source, call.attrs.axis, call.attrs.keepdims),
                                 name_hint=binding.var.name)
        self.set_var_remap(binding.var, new)


def detach(mod: tvm.IRModule, name: str) -> tvm.IRModule:
    """`mod` with the shift maxima of function `name` detached (unchanged when it has none)."""
    fn = mod[name]
    maxima = shift_maxima(fn)
    if not maxima:
        return mod
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    out[name] = _Detach(mod, maxima).visit_expr(fn)
    return out


@relax.expr_functor.mutator
class _Attach(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        return call.args[0] if _op(call) == "relax.grad.no_grad" else call


def attach(fn: relax.Function) -> relax.Function:
    """`fn` with every `no_grad(x)` read as x again (after Gradient, it is the identity)."""
    return _Attach().visit_expr(fn)
