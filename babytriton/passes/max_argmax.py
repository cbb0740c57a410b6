"""MaxWithArgmax: `values, indices = x.max(dim=d)` (and `x.min(dim=d)`) as ONE reduction giving both,
as torch's max.dim is, so a kernel reads x once for the two results.

The front end writes torch's max.dim as `max(x, d)` and `argmax(x, d)`. FuseMultiOutput would put the
two in one kernel (reductions over the same outer axes that read a common input), but as two
reductions side by side; the argmax's (index, value) reduction already holds the max as its value: the
element at the index, so NaN where a NaN is (the first NaN wins) and -inf for a row of -inf, as
torch's values, and one reduction computes both. This pass replaces each such pair
in a dataflow block with one call (legalize.arg_reduce) that writes both halves of the pair; the max
and the argmax keep their Relax vars (now items of the pair), so the fusion map still shows the
user's line. bfloat16's max and argmax each read their own float32 cast of x: one cast serves both.
"""
from __future__ import annotations

import tvm
from tvm import relax, te

from ..operators import legalize
from .blocks import BlockRewriter
from ..core.types import is_float_dtype

PAIRS = {"relax.max": "relax.argmax", "relax.min": "relax.argmin"}


def _op(value) -> str | None:
    return value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else None


def _source(x, value: dict):
    """What x is a float32 cast of (bfloat16's max reads one), else x itself."""
    v = value.get(x)
    return v.args[0] if _op(v) == "relax.astype" and str(v.attrs.dtype) == "float32" else x


def _key(call, value: dict):
    """What a max/min or argmax/argmin reduces, and how: equal for a max and its argmax."""
    x = call.args[0]
    if not (isinstance(x.ty, relax.TensorType) and is_float_dtype(str(x.ty.dtype)) and x.ty.ndim > 0) \
            or call.attrs.axis is None:
        return None
    axes = legalize._axes(call.attrs.axis, x.ty.ndim)
    shape = x.ty.shape.values if isinstance(x.ty.shape, relax.ShapeExpr) else None
    if len(axes) != 1 or shape is None or (isinstance(shape[axes[0]], tvm.tirx.IntImm) and int(shape[axes[0]]) == 1):
        # (over one element the pair is no reduction: a rule's vectors then ran its (index, value)
        # update lane by lane and stored the last lane's value in all of them)
        return None
    return _source(x, value), str(x.ty.dtype), axes[0], bool(call.attrs.keepdims)


def find(bindings: list) -> dict:
    """{max var: argmax binding} for the pairs of one dataflow block (each max and argmax once)."""
    value = {b.var: b.value for b in bindings if isinstance(b, relax.VarBinding)}
    reductions = {}
    for b in bindings:
        if _op(b.value) in PAIRS:
            key = _key(b.value, value)
            if key is not None:
                reductions.setdefault((PAIRS[_op(b.value)], key), b)
    pairs = {}
    for b in bindings:
        key = _key(b.value, value) if _op(b.value) in PAIRS.values() else None
        peak = reductions.pop((_op(b.value), key), None) if key is not None else None
        if peak is not None:
            pairs[peak.var] = b
    return pairs


def max_and_index(x: te.Tensor, name: str, axis: int, keepdims: bool, index_dtype: str):
    """TE: argmax/argmin's (index, value) reduction, both halves written out (index first)."""
    index, value = legalize.arg_reduce(x, name, [axis], keepdims, index_dtype)
    return [te.compute(index.shape, lambda *i: index(*i), name=f"T_{name}"),
            te.compute(value.shape, lambda *i: value(*i), name=f"T_{name}_value")]


class _Rewriter(BlockRewriter):
    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        pairs = find(bindings) if isinstance(block, relax.DataflowBlock) else {}
        if not pairs and all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        # each var of a pair -> (the pair's key, its item: the index 0, the value 1)
        item = {v: (peak, i) for peak, arg in pairs.items() for v, i in ((peak, 1), (arg.var, 0))}
        both, new = {}, []
        for b in bindings:
            if b.var not in item:
                new.append(b)
                continue
            peak, index = item[b.var]
            if peak not in both:  # the first of the two: the pair's call (its input is defined by now)
                arg = pairs[peak].value
                name = arg.op.name.split(".")[-1]
                call = self.builder.normalize(self.builder.call_te(
                    max_and_index, b.value.args[0], name, legalize._axes(arg.attrs.axis, arg.args[0].ty.ndim)[0],
                    bool(arg.attrs.keepdims), str(arg.ty.dtype), primfunc_name_hint=name))
                both[peak] = relax.DataflowVar(name, call.ty)
                new.append(relax.VarBinding(both[peak], call))
            new.append(relax.VarBinding(b.var, self.builder.normalize(relax.TupleGetItem(both[peak], index))))
        return type(block)(new, block.span)


def fuse_max_argmax(mod: tvm.IRModule) -> tvm.IRModule:
    """Every max and argmax (min and argmin) of the same values over the same axis as one reduction
    (see the module docstring); a cast that no longer has a reader is removed."""
    return _Rewriter(mod).rewrite_module()


def applies(target: tvm.target.Target | None) -> bool:
    """On GPU targets: there every rule that takes an argmax takes the pair (OuterReduction,
    InnerReduction). On a CPU the pair over columns that whole vectors don't tile, or along rows,
    went to CPUSpatial, slower than the max's vectorised kernel and the argmax's (a (138, 128, 150)
    max over the middle axis: 36 ms against 20 on 2 cores), though over whole vectors of columns
    it halved the time ((805, 12, 64) over axis 0: 1.7 ms against 3.1)."""
    return target is not None and target.kind.name == "cuda"


MaxWithArgmax = tvm.transform.module_pass(lambda mod, _ctx: fuse_max_argmax(mod), opt_level=0, name="MaxWithArgmax")
