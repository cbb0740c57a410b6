"""DecomposeSoftmax: the library `nn.softmax` / `nn.log_softmax` over a row become the primitive ops a
softmax written by hand is (`m = max(x)`, `d = x - m`, `e = exp(d)`, `s = sum(e)`, then `e / s` or
`d - log(s)`), so that the fusion stages see into it.

LegalizeOps makes the library op one opaque kernel of four blocks: FuseOps and FuseRowwise cannot put
its producers (`tanh(s / cap) * cap`, a mask's `where`, a temperature's divide) or its consumers in
it, so each is a kernel writing a whole tensor that the next reads back. As primitives, OnlineSoftmax
(GPU, long rows) makes the max and the exp-sum one reduction and FuseRowwise makes the producers, the
softmax and its element-wise consumers one row kernel, as Inductor's scheduler fuses them.

The numerics are the legalization's (topi's formulas, legalize.HALF_ACCUMULATE): a float16/bfloat16
input is cast to float32 first, everything is computed in float32 and the result rounded once. A NaN
in a row makes the row NaN through the sum; a row of -inf (all masked) gives -inf - -inf = NaN, as in
torch; a size-1 row gives x - x (NaN for ±inf: legalize's `subtract` keeps it from folding to 0).
Only rows where one kernel may hold several reductions are decomposed (rowwise.several_reductions:
the innermost axes); over an outer axis the library op stays one OuterReduction kernel, where its
primitives would be two kernels. DECOMPOSE = False turns the stage off.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from . import rowwise
from ..operators.legalize import HALF

DECOMPOSE = True

_FLOATS = ("float64", "float32") + HALF


def _softmax(bb: relax.BlockBuilder, x: relax.Expr, axis: int) -> relax.Expr:
    """exp(x - max x) / sum(exp(x - max x)) over `axis`, each step a binding of its own."""
    shifted, total = _shifted_exp_sum(bb, x, axis)
    return relax.op.divide(shifted[1], total)


def _log_softmax(bb: relax.BlockBuilder, x: relax.Expr, axis: int) -> relax.Expr:
    """(x - max x) - log(sum(exp(x - max x))) over `axis` (topi's formula)."""
    shifted, total = _shifted_exp_sum(bb, x, axis)
    return relax.op.subtract(shifted[0], bb.emit(relax.op.log(total), name_hint="log_sum"))


def _shifted_exp_sum(bb: relax.BlockBuilder, x: relax.Expr, axis: int):
    """((x - m, exp(x - m)), sum of exp(x - m)) with m the max of x over `axis`, both kept."""
    peak = bb.emit(relax.op.max(x, [axis], keepdims=True), name_hint="row_max")
    shifted = bb.emit(relax.op.subtract(x, peak), name_hint="shifted")
    exp = bb.emit(relax.op.exp(shifted), name_hint="exp")
    return (shifted, exp), bb.emit(relax.op.sum(exp, [axis], keepdims=True), name_hint="exp_sum")


_DECOMPOSITIONS = {"relax.nn.softmax": _softmax, "relax.nn.log_softmax": _log_softmax}


def _row_axis(call: relax.Call) -> int | None:
    """The axis of a library softmax to decompose (see the module docstring); None to keep it."""
    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in _DECOMPOSITIONS):
        return None
    ty = call.args[0].ty
    if not (isinstance(ty, relax.TensorType) and str(ty.dtype) in _FLOATS and isinstance(ty.shape, relax.ShapeExpr)):
        return None
    shape = tuple(ty.shape.values)
    axis = int(call.attrs.axis) % len(shape) if shape else 0
    return axis if shape and rowwise.several_reductions(rowwise.Rows(shape, (axis,))) else None


def _number(value, numbers: dict):
    """A value number: equal for the same op with equal attributes on values of equal numbers (a var's
    number is its value's, an input's is itself); None for what is not numbered."""
    if isinstance(value, relax.Var):
        return numbers.get(value, ("input", value))
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        operands = tuple(_number(a, numbers) for a in value.args)
        attrs = None if value.attrs is None else tvm_ffi.structural_hash(value.attrs)
        return None if None in operands else ("call", value.op.name, operands, attrs)
    if isinstance(value, relax.Expr) and not relax.analysis.free_vars(value):  # a constant, a shape
        return ("constant", tvm_ffi.structural_hash(value))
    return None


def _repeats(func: relax.Function) -> dict:
    """softmax var -> the var of an earlier softmax of its dataflow block on equal values: computed
    once (ReductionsOnce would merge only their max and sum, and the two row groups sharing them
    would each fall apart into kernels)."""
    found = {}
    for block in _blocks(func):
        numbers, first = {}, {}
        for b in block.bindings:
            number = _number(b.value, numbers)
            numbers[b.var] = number if number is not None else ("input", b.var)
            if number is None or _row_axis(b.value) is None:
                continue
            if number in first:
                found[b.var] = first[number]
            else:
                first[number] = b.var
    return found


@relax.expr_functor.mutator
class _Decompose(relax.PyExprMutator):
    """Each decomposable library softmax of a dataflow block written as its primitives; the last one
    keeps the softmax's var (the fusion map and the function's results know it)."""

    def __init__(self, mod: tvm.IRModule, repeats: dict):
        super().__init__(mod)
        self.repeats = repeats

    def visit_var_binding_(self, binding):
        axis = _row_axis(binding.value)
        if axis is None or not self.builder_.current_block_is_dataflow():
            return super().visit_var_binding_(binding)
        if binding.var in self.repeats:
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.repeats[binding.var]))
            return
        x = self.visit_expr(binding.value.args[0])
        dtype = str(x.ty.dtype)
        if dtype in HALF:  # accumulated in float32, rounded once (legalize.HALF_ACCUMULATE)
            x = self.builder_.emit(relax.op.astype(x, "float32"), name_hint="widened")
        value = _DECOMPOSITIONS[binding.value.op.name](self.builder_, x, axis)
        if dtype in HALF:
            value = relax.op.astype(self.builder_.emit(value, name_hint="rounded"), dtype)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(value)))


def decompose(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with its Relax functions' row softmaxes decomposed (unchanged when DECOMPOSE is off)."""
    if not DECOMPOSE:
        return mod
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function) and any(
                _row_axis(b.value) is not None for block in _blocks(func) for b in block.bindings):
            out[gvar] = _Decompose(mod, _repeats(func)).visit_expr(func)
    return out


def _blocks(func: relax.Function):
    """Every binding block of `func`, those inside If branches included."""
    stack = [func.body]
    while stack:
        seq = stack.pop()
        if not isinstance(seq, relax.SeqExpr):
            continue
        for block in seq.blocks:
            yield block
            stack += [b.value.true_branch for b in block.bindings if isinstance(b.value, relax.If)]
            stack += [b.value.false_branch for b in block.bindings if isinstance(b.value, relax.If)]


DecomposeSoftmax = tvm.transform.module_pass(lambda mod, _ctx: decompose(mod), opt_level=0, name="DecomposeSoftmax")
