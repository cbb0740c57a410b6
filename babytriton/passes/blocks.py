"""Rewriting a Relax function block by block, the blocks inside `If` branches included: the walk that
babytriton's own fusion stages (FuseRowwise, FuseMultiOutput, OnlineSoftmax) share. Each stage says
only what becomes of one block (`block`)."""
from __future__ import annotations

import tvm
from tvm import relax


class BlockRewriter:
    """Walks functions, sequences and branches; a subclass rewrites one binding block in `block`."""

    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.builder = relax.BlockBuilder(mod)

    def function(self, func: relax.Function) -> relax.Function:
        body = self.seq(func.body)
        if body.same_as(func.body):
            return func
        return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)

    def rewrite_module(self) -> tvm.IRModule:
        """The module with the blocks of every Relax function rewritten and the bindings nothing reads
        any more removed; the module itself where no block changed."""
        changed = False
        for gvar, func in list(self.mod.functions_items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                new = self.function(func)
                if not new.same_as(func):
                    self.builder.update_func(gvar, relax.analysis.remove_all_unused(new))
                    changed = True
        return self.builder.get() if changed else self.mod

    def seq(self, seq):
        if not isinstance(seq, relax.SeqExpr):
            return seq
        blocks = [self.block(b) for b in seq.blocks]
        if all(new.same_as(old) for new, old in zip(blocks, seq.blocks)):
            return seq
        return relax.SeqExpr(blocks, seq.body, seq.span)

    def block(self, block):
        raise NotImplementedError

    def branches(self, binding):
        """`binding` with the blocks of its `If` branches rewritten (itself when it is no `If`)."""
        value = binding.value
        if not isinstance(value, relax.If):
            return binding
        true, false = self.seq(value.true_branch), self.seq(value.false_branch)
        if true.same_as(value.true_branch) and false.same_as(value.false_branch):
            return binding
        return relax.VarBinding(binding.var, relax.If(value.cond, true, false, value.span), binding.span)
