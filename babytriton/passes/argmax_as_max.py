"""ArgmaxAsMax: on a CPU, `x.argmax(-1)` (argmin too) as the row's max, then the first index that holds it.

An argmax is a reduction of (index, value) pairs whose NaN-aware combiner has no vector form: over the
contiguous axis, each row is then a scalar loop (6.1 ms for 32768 rows of 64 on one thread; torch's own
6.1). Written as two reductions it is two vector loops (2.7 ms): `m = x.max(-1)` (NaN when the row
holds one, as torch's), then the smallest index i where `x[i] == m`, or where both are NaN. That is
torch's answer exactly: the first maximum, the first NaN where there is one, index 0 for a row of -inf;
FuseRowwise puts both reductions in one row kernel (the max is the first pass of the index's). On a GPU
the pair stays one reduction (InnerReduction's warps combine pairs; max_argmax.py), and over outer axes
CPUOuterReduction already takes the pair a column a lane.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..core.types import is_float_dtype
from ..operators import legalize
from .blocks import BlockRewriter

PEAKS = {"relax.argmax": relax.op.max, "relax.argmin": relax.op.min}


def _rewritten(call, emit) -> relax.Expr | None:
    """The index of the first peak along the innermost axis of rows, as max/min, compare and min, its
    steps bound by `emit(expr, name) -> var`: the same result as `call`; None (nothing emitted) for
    what stays a pair (an outer axis, a whole tensor, a bool input, an axis of one element)."""
    x = call.args[0]
    if not isinstance(x.ty, relax.TensorType) or not isinstance(x.ty.shape, relax.ShapeExpr) or x.ty.ndim < 1:
        return None
    dtype, shape = str(x.ty.dtype), list(x.ty.shape.values)
    # rows only: a whole tensor's pair is cut into chunks that run in parallel (CPUReduction._pairs),
    # where a max over it is a kernel apart from its consumers (rowwise.WholeReductionsApart)
    if dtype == "bool" or call.attrs.axis is None or len(shape) < 2 \
            or legalize._axes(call.attrs.axis, len(shape)) != [len(shape) - 1]:
        return None
    size = shape[-1]
    if isinstance(size, tvm.tirx.IntImm) and size.value <= 1:
        return None
    peak = emit(PEAKS[call.op.name](x, axis=-1, keepdims=True), "peak")
    hit = emit(relax.op.equal(x, peak), "hit")
    if is_float_dtype(dtype):  # NaN == NaN is false: the first NaN is where the peak is NaN
        nan = emit(relax.op.logical_and(emit(relax.op.isnan(x), "nan"), emit(relax.op.isnan(peak), "nan_peak")),
                   "nan_hit")
        hit = emit(relax.op.logical_or(hit, nan), "hit")
    index_dtype = str(call.ty.dtype)
    index = emit(relax.op.arange(0, size, 1, index_dtype), "index")
    # every row holds its peak, so a miss may be any index past the row (the pair's identity, as before)
    miss = relax.const(legalize._last_index(index_dtype).value, index_dtype)
    return relax.op.min(emit(relax.op.where(hit, index, miss), "candidate"), axis=-1,
                        keepdims=bool(call.attrs.keepdims))


class _Rewriter(BlockRewriter):
    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        new = []

        def emit(expr, name):
            value = self.builder.normalize(expr)
            var = (relax.DataflowVar if isinstance(block, relax.DataflowBlock) else relax.Var)(name, value.ty)
            new.append(relax.VarBinding(var, value))
            return var
        for b in bindings:
            value = b.value
            if isinstance(b, relax.VarBinding) and isinstance(value, relax.Call) \
                    and isinstance(value.op, tvm.ir.Op) and value.op.name in PEAKS:
                first = _rewritten(value, emit)
                if first is not None:
                    b = relax.VarBinding(b.var, self.builder.normalize(first), b.span)
            new.append(b)
        if all(n.same_as(o) for n, o in zip(new, block.bindings)) and len(new) == len(block.bindings):
            return block
        return type(block)(new, block.span)


def argmax_as_max(mod: tvm.IRModule) -> tvm.IRModule:
    """Every argmax/argmin along the innermost axis of rows as the first index of its max/min (see
    the module docstring)."""
    return _Rewriter(mod).rewrite_module()


def applies(target: tvm.target.Target | None) -> bool:
    """On CPU targets (see the module docstring)."""
    return target is not None and target.kind.name == "llvm"


ArgmaxAsMax = tvm.transform.module_pass(lambda mod, _ctx: argmax_as_max(mod), opt_level=0, name="ArgmaxAsMax")
