"""One parameter per tensor: a kernel that FuseTIR gave the same tensor as several arguments (the views
that RepeatViews repeats for each reader: group norm's `x.reshape(n, g, -1)`, read by the mean, the
variance and the output) gets it once, so that its row schedule sees one input read by several passes
(and reads it once: schedules/kept_rows.py), not three inputs each read once."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx

from .blocks import BlockRewriter

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


class _Deduplicated(BlockRewriter):
    """Each call_tir whose arguments repeat a tensor calls a copy of its kernel taking it once."""

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        values = {b.var: b.value for b in bindings}
        bindings = [self._once(b, values) for b in bindings]
        if all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        return type(block)(bindings, block.span)

    def _once(self, binding, values: dict):
        call = binding.value
        if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR) and isinstance(call.args[1], relax.Tuple)):
            return binding
        func = self.mod[call.args[0]]
        operands = list(call.args[1].fields)
        if not isinstance(func, tirx.PrimFunc) or len(func.params) < len(operands):
            return binding
        first = [next(j for j in range(i + 1) if _same_tensor(operands[j], operands[i], values))
                 for i in range(len(operands))]
        if first == list(range(len(operands))):
            return binding
        params = list(func.params)
        kept = [params[i] for i in range(len(operands)) if first[i] == i] + params[len(operands):]
        renamed = {params[i]: params[first[i]] for i in range(len(operands)) if first[i] != i}
        body = tvm_ffi.structural_map(func.body, [(tvm.ir.Var, lambda var: renamed.get(var, var))])
        new = tirx.PrimFunc(kept, body, func.ret_type, func.attrs, func.span)
        gvar = self.builder.add_func(new, call.args[0].name_hint)
        args = relax.Tuple([operands[i] for i in range(len(operands)) if first[i] == i])
        return relax.VarBinding(binding.var, relax.Call(call.op, [gvar, args, *call.args[2:]], call.attrs,
                                                        call.ty_args, call.span), binding.span)


def _same_tensor(a, b, values: dict) -> bool:
    """The same variable, or two reshapes of one tensor to one shape (the same memory, the same view)."""
    if a.same_as(b):
        return True
    va, vb = values.get(a), values.get(b)
    return isinstance(va, relax.Call) and isinstance(va.op, tvm.ir.Op) and va.op.name == "relax.reshape" and \
        tvm_ffi.structural_equal(va, vb)


def deduplicate_operands(mod: tvm.IRModule) -> tvm.IRModule:
    """After FreeReshapes: every kernel takes each tensor once (see _Deduplicated)."""
    out = _Deduplicated(mod).rewrite_module()
    return out if out.same_as(mod) else relax.transform.DeadCodeElimination()(out)  # the kernels replaced


DeduplicateOperands = tvm.transform.module_pass(lambda mod, _ctx: deduplicate_operands(mod), opt_level=0,
                                                name="DeduplicateOperands")
