"""Views cost nothing: a view-like op (`unsqueeze`, `reshape`, `squeeze`, `permute_dims`, `broadcast_to`,
a slice) read by several consumers is repeated for each of them, so that every consumer's kernel
indexes through it instead of one copy kernel writing it out.

FuseOps fuses an injective op into its consumer only where that consumer is its one reader: rotary
embedding's `cos.unsqueeze(1)`, read by the q and the k products, was a kernel of its own, writing a
copy of cos. Each repeated view is one index computation in its consumer's loop, as Inductor inlines
views into every kernel that reads them. A view that is a result of the function keeps its binding.
"""
from __future__ import annotations

import tvm
from tvm import relax

VIEW_OPS = {"relax.expand_dims", "relax.squeeze", "relax.reshape", "relax.permute_dims", "relax.broadcast_to",
            "relax.strided_slice", "relax.flatten"}


def _view(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in VIEW_OPS


def _readers(fn: relax.Function) -> dict:
    """Var -> how many bindings of a dataflow block read it."""
    counts: dict = {}
    for block in fn.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        for binding in block.bindings:
            for var in relax.analysis.free_vars(binding.value):
                counts[var] = counts.get(var, 0) + 1
    return counts


@relax.expr_functor.mutator
class _Repeat(relax.PyExprMutator):
    """Each read of a shared view becomes a view of its own, emitted just before its reader."""

    def __init__(self, mod, shared: dict):
        super().__init__(mod)
        self.shared = shared   # var -> its view call, read by several bindings

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(value, relax.Call) and \
                any(v in self.shared for v in relax.analysis.free_vars(value)):
            value = relax.Call(value.op, [self._own(a) for a in value.args], value.attrs, value.ty_args)
            emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
            new = emit(value, name_hint=binding.var.name)   # a result of the block stays one
            self.set_var_remap(binding.var, new)
            return
        super().visit_var_binding_(binding)

    def _own(self, arg):
        """`arg` with each shared view it is (or holds, in a tuple) emitted afresh for this reader."""
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([self._own(f) for f in arg.fields])
        if arg not in self.shared:
            return self.visit_expr(arg)   # a var bound again above (it read a shared view) is its new var
        view = self.shared[arg]
        return self.builder_.emit(relax.Call(view.op, [self._own(a) for a in view.args], view.attrs, view.ty_args),
                                  name_hint="view")


def repeat_views(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with each view read by several consumers repeated for each (see the module's docstring)."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, fn in mod.functions.items():
        if not isinstance(fn, relax.Function):
            continue
        counts = _readers(fn)
        shared = {b.var: b.value for block in fn.body.blocks if isinstance(block, relax.DataflowBlock)
                  for b in block.bindings if _view(b.value) and counts.get(b.var, 0) > 1}
        if shared:
            out[gv] = _Repeat(mod, shared).visit_expr(fn)
    return relax.transform.DeadCodeElimination()(out)
