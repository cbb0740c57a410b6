"""OnlineSoftmax: `m = max(x)` and `s = sum(exp(x - m))` over the same rows become ONE reduction giving
(m, s), as Inductor's online softmax does, so a GPU row kernel reads x once for both statistics.

The pair is reduced with `legalize.online_combine` (the running max and the sum rescaled to it), in
float32 for half inputs and rounded once to the sum's dtype, as the two-pass legalization does
(HALF_ACCUMULATE). It matches the shapes users write: softmax, log-softmax, logsumexp, cross-entropy
(the max kept or dropped then expanded back, bfloat16's max taken through astype float32, and
torch.logsumexp's max made 0 where it is ±inf). The
max and the sum keep their Relax vars (now items of the pair), so the fusion map still shows the
user's max and sum lines; `x - m` and `exp` stay where something else reads them (softmax's divide).
Applied on GPU targets to rows of at least MIN_ROW elements only: on a CPU, CPUReduction cannot vectorise a two-value reduction (see there),
and two passes over a row in cache cost less than the second exp per element.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, te, tirx, topi

from ..operators import legalize
from .blocks import BlockRewriter

NAME = "online_softmax"


def _is_op(value, name: str) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == name


def _shape(expr):
    ty = expr.ty
    return list(ty.shape.values) if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr) else None


def _same(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        tvm_ffi.structural_equal(p, q) for p, q in zip(a, b))


def _axes(call) -> list[int]:
    return legalize._axes(call.attrs.axis, call.args[0].ty.ndim)


class _Pair:
    """A matched max (the binding to replace first) and exp-sum over the same x; `guarded` where the
    exp subtracts torch.logsumexp's max made 0 where it is ±inf."""

    def __init__(self, x, max_var, max_call, sum_var, sum_call, axes, guarded):
        self.x, self.max_var, self.max_call, self.sum_var, self.sum_call = x, max_var, max_call, sum_var, sum_call
        self.axes, self.guarded = axes, guarded


def _find(bindings: list) -> list[_Pair]:
    """The (max, exp-sum) pairs of one dataflow block."""
    value = {b.var: b.value for b in bindings if isinstance(b, relax.VarBinding)}
    pairs, used = [], set()
    for b in bindings:
        s = b.value
        if not (_is_op(s, "relax.sum") and _is_float(s.args[0])):
            continue
        e = value.get(s.args[0])
        d = value.get(e.args[0]) if _is_op(e, "relax.exp") else None
        if not _is_op(d, "relax.subtract"):
            continue
        x, peak = d.args
        axes = _axes(s)
        unguarded = _unguarded(peak, value)
        found = _max_of(x, unguarded if unguarded is not None else peak, value, axes)
        if found is None or found in used or not _same(_shape(x), _shape(d)) or str(x.ty.dtype) != str(d.ty.dtype):
            continue
        if not (isinstance(found, relax.DataflowVar) and isinstance(b.var, relax.DataflowVar)):
            # the max or the sum is also a result: FuseRowwise keeps it out of the row kernel, and
            # a kernel of the pair alone would have two results, which no GPU rule schedules
            continue
        if not _long_rows(x, axes):
            continue
        used.add(found)
        pairs.append(_Pair(x, found, value[found], b.var, s, axes, unguarded is not None))
    return pairs


def _unguarded(peak, value: dict):
    """m where `peak` is `where(isinf(m), 0, m)` (torch.logsumexp's shift), else None."""
    guard = value.get(peak)
    if not _is_op(guard, "relax.where"):
        return None
    test, zero, m = guard.args
    test = value.get(test)
    if not (_is_op(test, "relax.isinf") and test.args[0].same_as(m) and isinstance(zero, tvm.ir.Constant)):
        return None
    return m if zero.value.numpy().size == 1 and float(zero.value.numpy()) == 0.0 else None


def _max_of(x, peak, value: dict, axes: list[int]):
    """The var bound to the max of x over `axes` that `peak` is, kept (keepdims), dropped and
    expanded back, or bfloat16's taken in float32 and cast back; None if it is none of those."""
    kept = [1 if i in axes else d for i, d in enumerate(_shape(x) or [])]
    shape = _shape(peak)
    if shape is None or len(shape) != len(kept) or not all(
            (isinstance(d, tirx.IntImm) and d.value == 1) if i in axes else tvm_ffi.structural_equal(d, k)
            for i, (d, k) in enumerate(zip(shape, kept))):
        return None
    var, v = peak, value.get(peak)
    if _is_op(v, "relax.expand_dims") or _is_op(v, "relax.reshape"):
        var, v = v.args[0], value.get(v.args[0])
    if _is_op(v, "relax.astype") and str(v.attrs.dtype) == str(x.ty.dtype):  # bfloat16's
        var, v = v.args[0], value.get(v.args[0])
    if not (_is_op(v, "relax.max") and _axes(v) == axes):
        return None
    source = v.args[0]
    if not source.same_as(x):
        cast = value.get(source)
        if not (_is_op(cast, "relax.astype") and cast.args[0].same_as(x) and str(cast.attrs.dtype) == "float32"):
            return None
    return var


# Rows shorter than this keep their two passes: the second read of a 4096-wide row comes from the L2
# cache, and the online form's extra exp and rescale per element cost more (H100, 2026-11-24: softmax
# over 4096 x 4096 fp32 took 63 us online against 48 us in two passes; cross-entropy over 32000-wide
# rows 496 us against 546 us).
MIN_ROW = 16384


def _long_rows(x, axes: list[int]) -> bool:
    """Whether the reduced extent is static and at least MIN_ROW."""
    shape = _shape(x)
    if shape is None:
        return False
    extent = 1
    for axis in axes:
        if not isinstance(shape[axis], tirx.IntImm):
            return False
        extent *= int(shape[axis])
    return extent >= MIN_ROW


def _is_float(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) in ("float32", "float16", "bfloat16")


def _kept_index(index, axes, ndim, keepdims):
    """The index into the keepdims-shaped pair of an output index (reduced axes dropped or not)."""
    out, full = iter(index), []
    for i in range(ndim):
        if i in axes:
            full.append(0)
            if keepdims:
                next(out)
        else:
            full.append(next(out))
    return full


def online_softmax(x: te.Tensor, axes: list[int], m_dtype: str, m_keepdims: bool, s_dtype: str, s_keepdims: bool,
                   guarded: bool = False):
    """TE: the max of x over `axes` and the sum of exp(x - max), reduced together in float32; `guarded`,
    the sum of exp(x - max) with the max taken as 0 where it is ±inf (`legalize.guarded_online_sum`)."""
    finish = legalize.guarded_online_sum if guarded else legalize.online_sum
    reducer = legalize.reducers()[NAME]
    one = tirx.const(1, "float32")

    # half inputs as a float32 stage of their own (inlined by the schedules)
    x = x if x.dtype == "float32" else topi.cast(x, "float32")

    def body(full, raxes):
        return reducer((one, x[tuple(full)]), axis=raxes)
    s, m = legalize._reduce_compute(x, axes, True, body, "T_online_temp")
    ndim = len(x.shape)

    def shape(keepdims):
        return [1 if i in axes else n for i, n in enumerate(x.shape) if keepdims or i not in axes]

    def cast(v, dtype):
        return v if dtype == "float32" else tirx.Cast(dtype, v)

    # the pair stays a temporary, each half copied out by a block of its own (as legalize's argmax)
    m_out = te.compute(shape(m_keepdims), lambda *i: cast(m(*_kept_index(i, axes, ndim, m_keepdims)), m_dtype),
                       name="T_online_max")
    s_out = te.compute(shape(s_keepdims), lambda *i: cast(finish(
        m(*_kept_index(i, axes, ndim, s_keepdims)), s(*_kept_index(i, axes, ndim, s_keepdims))), s_dtype),
        name="T_online_sum")
    return [m_out, s_out]


class _Rewriter(BlockRewriter):
    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        pairs = _find(bindings) if isinstance(block, relax.DataflowBlock) else []
        if not pairs and all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        at_max = {p.max_var: p for p in pairs}
        at_sum = {p.sum_var: p for p in pairs}
        items = {}
        new = []
        for b in bindings:
            pair = at_max.get(b.var)
            if pair is not None:
                call = self.builder.normalize(self.builder.call_te(
                    online_softmax, pair.x, pair.axes, str(b.var.ty.dtype), bool(pair.max_call.attrs.keepdims),
                    str(pair.sum_var.ty.dtype), bool(pair.sum_call.attrs.keepdims), pair.guarded,
                    primfunc_name_hint=NAME))
                both = relax.DataflowVar("online", call.ty)
                new.append(relax.VarBinding(both, call))
                items[pair] = both
                new.append(relax.VarBinding(b.var, self.builder.normalize(relax.TupleGetItem(both, 0))))
                continue
            pair = at_sum.get(b.var)
            if pair is not None:
                new.append(relax.VarBinding(b.var, self.builder.normalize(relax.TupleGetItem(items[pair], 1))))
                continue
            new.append(b)
        return type(block)(new, block.span)


def fuse_online(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite every (max, exp-sum) pair into one online reduction (see the module docstring); the
    `x - m` and `exp` that nothing else reads are removed."""
    return _Rewriter(mod).rewrite_module()


def applies(target: tvm.target.Target | None) -> bool:
    """On GPU targets (see the module docstring)."""
    return target is not None and target.kind.name == "cuda"


OnlineSoftmax = tvm.transform.module_pass(lambda mod, _ctx: fuse_online(mod), opt_level=0, name="OnlineSoftmax")
