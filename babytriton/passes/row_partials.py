"""RowPartials: a reduction over the rows' axes and others (`softmax(x).sum()`, KL divergence's
`batchmean`) of a tile that a row group computes becomes that group's reduction over its rows plus a
small reduction of the per-row partials, as Inductor splits a reduction after a row kernel.

FuseRowwise keeps one Rows per group, so `x.sum()` of a row group's tile was a kernel of its own: the
row kernel wrote the whole tile (KL divergence's 8192 x 4096 terms, 128 MB) for it to read back. Here
`r(T, A)` (sum, mean, max, min over axes A) of a tile T of rows reduced over B (B a proper part of A)
becomes `p = r(T, B, keepdims)`, one more reduction over the group's own rows that joins it, and
`r(p, A)` (T may also be read through a reshape: `y.flatten().sum()`); a mean is a sum then a divide
by the whole count, and a half sum or mean adds in float32 from the tile on and rounds once, as its
one kernel did (legalize.HALF_ACCUMULATE). Runs after
AnnotateTIROpPattern: what a reduction computes is read off its kernel (it must be, structurally, the
kernel LegalizeOps makes of that Relax op), and a split is kept only where FuseRowwise then puts the
partial in the group that computes T (else the group writes T and the partial would be one more
kernel reading it back). A T also read elsewhere is still written: by that group besides the partial
where FuseRowwise lets a row kernel write both, else the split is undone. prod, argmax and the rest
are left as they are; so is a max or min over symbolic sizes, whose emptiness check stands between
the dataflow block computing T and the one reducing it (the pass works within a block).
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx, topi

from ..operators import legalize
from . import rowwise
from .blocks import BlockRewriter

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
# Whether the pass splits anything (off: each such reduction stays a kernel reading the whole tile)
SPLIT = True
# the reductions split (prod, argmax and the rest are left), each with the reduction of its partials
_KINDS = {"sum": relax.op.sum, "mean": relax.op.sum, "max": relax.op.max, "min": relax.op.min}
_PARTIAL = "rows_partial"  # the name of the partial's binding in the split's module


# --------------------------------------------------------------------------------------------------
# which reductions: of a tile a row group computes, over its rows' axes and more
# --------------------------------------------------------------------------------------------------

def _candidates(mod: tvm.IRModule, bindings: list) -> list:
    """(binding, tile, rows, its own rows) for each reduction of a block whose operand is a tile
    computed from a reduction over rows of that tile's shape (the nearest such one: a row group's),
    whose axes strictly contain those rows' reduced axes."""
    graph = rowwise._Graph(bindings)
    ops = {b.var: rowwise._classify(mod, b) for b in bindings}
    found = []
    for b in bindings:
        op = ops[b.var]
        if op is None or op.kind != "reduce" or len(op.operands) != 1 or op.operands[0] not in ops \
                or _statically_empty(op.rows.shape):
            continue
        tile, reduced = _through_reshape(op, ops)
        rows = _rows_behind(tile, reduced, ops, graph)
        if rows is not None:
            found.append((b, tile, rows, reduced))
    return found


def _through_reshape(op, ops: dict) -> tuple:
    """The tile a reduction reads and the rows it reduces; a reduction of every element of a
    reshaped tile (`y.flatten().sum()`) reduces every axis of the tile itself."""
    (tile,) = op.operands
    view = ops.get(tile)
    if op.rows.whole and view is not None and view.kind == "injective" and view.reshape \
            and len(view.operands) == 1 and view.operands[0] in ops:
        source = view.operands[0]
        shape = rowwise._shape(source)
        return source, rowwise.Rows(shape, range(len(shape)))
    return tile, op.rows


def _rows_behind(tile, reduced: rowwise.Rows, ops: dict, graph) -> rowwise.Rows | None:
    """The rows of the nearest reduction that `tile` is computed from, if they are rows of the same
    shape over innermost axes that `reduced` reduces and more (a row group FuseRowwise may make)."""
    seen, todo = {tile}, [tile]
    while todo:
        v = todo.pop(0)
        op = ops.get(v)
        if op is None:
            continue
        if op.kind == "reduce":
            rows = op.rows
            if rows == rowwise.Rows(reduced.shape, rows.axes) and rowwise.several_reductions(rows) \
                    and set(rows.axes) < set(reduced.axes):
                return rows
            continue
        for p in graph.producers[v]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return None


def _statically_empty(shape) -> bool:
    return any(isinstance(d, tirx.IntImm) and d.value == 0 for d in shape)


# --------------------------------------------------------------------------------------------------
# what a reduction kernel computes, and its split
# --------------------------------------------------------------------------------------------------

def _module(params: list, body) -> tvm.IRModule:
    """A module of one function of `params` whose dataflow block `body(bb, *params)` emits, legalized,
    annotated and with its whole reductions apart, as the pipeline makes its kernels."""
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *params))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(legalize.legalize_map())(bb.get())
    return rowwise.whole_reductions_apart(relax.transform.AnnotateTIROpPattern()(mod))


def _kernel_of(mod: tvm.IRModule, param):
    """The kernel of the first call in `mod`'s main that reads `param`."""
    for binding in mod["main"].body.blocks[0].bindings:
        call = binding.value
        if isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR) \
                and any(a.same_as(param) for a in call.args[1].fields):
            return mod[call.args[0]]
    return None


def _kind(mod: tvm.IRModule, binding, operand, axes: tuple) -> str | None:
    """Which of _KINDS the reduction's kernel is, compared with the kernel LegalizeOps makes of each
    (over the same axes, keepdims as its result has): None when none is, structurally."""
    kernel = mod[binding.value.args[0]]
    keepdims = binding.var.ty.ndim == operand.ty.ndim
    x = relax.Var("x", operand.ty)
    for name in _KINDS:
        op = getattr(relax.op, name)
        made = _module([x], lambda bb, x, op=op: op(x, axis=list(axes), keepdims=keepdims))
        candidate = _kernel_of(made, made["main"].params[0])
        if candidate is not None and tvm_ffi.structural_equal(_bare(candidate), _bare(kernel), map_free_vars=True):
            return name
    return None


def _bare(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return tirx.PrimFunc(func.params, func.body, func.ret_type)


def _split_module(kind: str, tile, out_ty, rows_axes: tuple, axes: tuple) -> tvm.IRModule:
    """The split of `kind(tile, axes)` into the partial over `rows_axes` (kept as axes of one) and
    the reduction of the partials over `axes`, giving `out_ty`."""
    dtype = str(tile.ty.dtype)
    acc = "float32" if kind in legalize.HALF_ACCUMULATE and dtype in legalize.HALF else dtype
    shape = list(tile.ty.shape.values)
    keepdims = out_ty.ndim == len(shape)
    count = 1
    for a in axes:
        count = count * shape[a]
    combine = _KINDS[kind]

    def body(bb, x):
        value = x if acc == dtype else bb.emit(relax.op.astype(x, acc))
        partial = bb.emit(combine(value, axis=list(rows_axes), keepdims=True), name_hint=_PARTIAL)
        out = bb.emit(combine(partial, axis=list(axes), keepdims=keepdims))
        if kind == "mean":
            out = bb.emit(bb.call_te(lambda t, n: topi.divide(t, tirx.Cast(acc, n)), out, count,
                                     primfunc_name_hint="divide"))
        if str(out_ty.dtype) != acc:
            out = bb.emit(relax.op.astype(out, str(out_ty.dtype)))
        return out
    return _module([relax.Var("x", tile.ty)], body)


def _inlined(builder: relax.BlockBuilder, made: tvm.IRModule, tile, var) -> tuple | None:
    """The bindings of `made`'s main with its parameter read as `tile`, its kernels added to the
    module being built and its result bound to `var`, and the partial's var; None where its type
    is not var's."""
    func = made["main"]
    bindings = [b for block in func.body.blocks for b in block.bindings]
    if not tvm_ffi.structural_equal(bindings[-1].var.ty, var.ty):
        return None
    calls = [b for b in bindings if not isinstance(b.value, relax.Var)]  # the output's alias aside
    remap, gvars, out = {func.params[0]: tile}, {}, []
    for b in calls:
        call, old = b.value, b.value.args[0]
        if old not in gvars:
            gvars[old] = builder.add_func(made[old], old.name_hint)
        operands = relax.Tuple([remap.get(a, a) for a in call.args[1].fields])
        new = var if b is calls[-1] else relax.DataflowVar(f"{var.name}_{b.var.name}", b.var.ty)
        out.append(relax.VarBinding(new, relax.Call(call.op, [gvars[old], operands, *call.args[2:]], call.attrs,
                                                    call.ty_args, call.span)))
        remap[b.var] = new
    partial = next(remap[b.var] for b in calls if b.var.name == _PARTIAL)
    return out, partial


# --------------------------------------------------------------------------------------------------
# rewriting: the splits FuseRowwise then fuses into their rows' group
# --------------------------------------------------------------------------------------------------

class _Rewriter(BlockRewriter):
    """Splits the reductions of each dataflow block, then undoes those FuseRowwise would not fuse."""

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        splits = self._splits(bindings) if isinstance(block, relax.DataflowBlock) else {}
        while splits:
            new = _applied(bindings, splits)
            failed = _unfused(self.builder.get(), new, splits)
            if not failed:
                return type(block)(new, block.span)
            for var in failed:
                del splits[var]
        if all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        return type(block)(bindings, block.span)

    def _splits(self, bindings: list) -> dict:
        """var -> (its replacing bindings, the partial, the tile) for each reduction to split."""
        splits = {}
        for binding, tile, rows, reduced in _candidates(self.builder.get(), bindings):
            read = rowwise._classify(self.builder.get(), binding)
            kind = _kind(self.builder.get(), binding, read.operands[0], read.rows.axes)
            if kind is None:
                continue
            made = _split_module(kind, tile, binding.var.ty, rows.axes, reduced.axes)
            inlined = _inlined(self.builder, made, tile, binding.var)
            if inlined is not None:
                splits[binding.var] = (*inlined, tile)
        return splits


def _applied(bindings: list, splits: dict) -> list:
    """The block's bindings with the splits in, without what is then read by nothing (the view a
    reduction read: left, it would be a second reader of the tile)."""
    new = [n for b in bindings for n in (splits[b.var][0] if b.var in splits else [b])]
    read, live = set(), []
    for b in reversed(new):
        if not isinstance(b, relax.VarBinding) or not isinstance(b.var, relax.DataflowVar) or b.var in read:
            live.append(b)
            read.update(rowwise._vars(b.value))
    return live[::-1]


def _unfused(mod: tvm.IRModule, bindings: list, splits: dict) -> list:
    """The splits whose partial FuseRowwise does not put in the group that computes its tile (the
    group then writes the tile, and the partial would be one more kernel reading it back). A tile
    also read elsewhere stays a result of that group where the group may write both."""
    groups = [set(g) for g in rowwise.partition(mod, bindings)]
    return [var for var, (_, partial, tile) in splits.items()
            if not any(partial in g and tile in g for g in groups)]


def row_partials(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with each reduction over a row group's rows and more split in two (module docstring)."""
    return _Rewriter(mod).rewrite_module() if SPLIT else mod


RowPartials = tvm.transform.module_pass(lambda mod, _ctx: row_partials(mod), opt_level=0, name="RowPartials")
