"""Reverse mode: the backward of a generated Relax function, through TVM's `relax.transform.Gradient`.

The vector-Jacobian product of `outs = f(params)` for incoming gradients `dys` is the gradient of the
scalar `sum_i sum(outs[i] * dys[i])` with respect to the parameters that need one: `vjp_module` writes
that scalar after f's body, lets Gradient differentiate it, and keeps only the gradients. The result is
an ordinary Relax function `<name>_backward(params..., dys...)`: the pipeline legalizes, fuses,
schedules and builds it like a forward. It recomputes the forward's values inside the same kernels
rather than reading them saved from the forward call (see `docs`/chapter 22 for the measured trade).

Gradient takes one dataflow block of ops that each have a registered gradient (`FPrimalGradient`);
`check` finds the first construct on the way from a differentiated parameter to a differentiated output
that breaks that (a run-time `if` or loop, an op without a gradient, a TensorIR kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax

from . import gradients  # registers the gradients TVM lacks or computes unlike torch
from .errors import debug_enabled, quiet_tvm
from .types import is_float_dtype


@dataclass
class NotDifferentiable(Exception):
    """Why Gradient cannot differentiate a function: `var` is the binding at fault (its line), or None."""
    var: relax.Var | None
    what: str
    node: object = None   # the user's expression (set by the backend, which knows the lines)

    def __str__(self):
        return self.what


def _calls(expr):
    """The Relax expressions `expr` reads (its arguments, through tuples)."""
    if isinstance(expr, relax.Call):
        return [a for arg in expr.args for a in _calls_leaf(arg)]
    if isinstance(expr, relax.Tuple):
        return [a for f in expr.fields for a in _calls_leaf(f)]
    if isinstance(expr, relax.TupleGetItem):
        return _calls_leaf(expr.tuple_value)
    if isinstance(expr, relax.If):
        return _calls_leaf(expr.cond)
    return _calls_leaf(expr)


def _calls_leaf(expr):
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, (relax.Tuple, relax.TupleGetItem, relax.Call)):
        return _calls(expr)
    return []


def _has_gradient(call: relax.Call) -> bool:
    op = call.op
    return isinstance(op, tvm.ir.Op) and op.get_attr("FPrimalGradient") is not None


def _carries_gradient(ty) -> bool:
    """Whether a value of this type can have a gradient: a float tensor, or a tuple holding one. An
    integer or bool value has none (every rule gives its integer and bool operands no_grad), so an op
    making one needs no gradient of its own (an integer sort, a cumprod of ints)."""
    if isinstance(ty, relax.TupleType):
        return any(_carries_gradient(f) for f in ty.fields)
    return not isinstance(ty, relax.TensorType) or str(ty.dtype) in ("", "void") or is_float_dtype(str(ty.dtype))


def _describe(call: relax.Call) -> str:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        if op.name in ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed"):
            kernel = call.args[0]
            name = getattr(kernel, "name_hint", None) or str(kernel)
            return f"the TensorIR kernel `{name}` (Gradient cannot see inside a kernel; give it a gradient with " \
                   "@bt.grad_for)"
        return f"`{op.name.removeprefix('relax.')}`, which has no registered gradient"
    return "a call of another function (a run-time loop)"


def check(fn: relax.Function, requires: tuple[bool, ...], outputs: tuple[bool, ...]) -> None:
    """Raise NotDifferentiable for the first binding Gradient cannot take: any run-time `if` or loop
    (Gradient needs one dataflow block), else an op without a gradient or a kernel on the way from a
    differentiated parameter to a differentiated output."""
    blocks = fn.body.blocks
    order = [b for block in blocks for b in block.bindings]
    for binding in order:
        value = binding.value
        if isinstance(value, relax.If):
            raise NotDifferentiable(binding.var, "a run-time `if` (the backward needs straight-line code)")
        if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
            raise NotDifferentiable(binding.var, "a run-time loop (the backward needs straight-line code)")
    live = {p for p, r in zip(fn.params, requires) if r}
    depends: dict = {}
    for binding in order:
        if any(v in live for v in _calls(binding.value)):
            live.add(binding.var)
            depends[binding.var] = binding
    body = fn.body.body
    results = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    wanted = {v for v, w in zip(results, outputs) if w and isinstance(v, relax.Var)}
    needed = set(wanted)
    for binding in reversed(order):
        if binding.var in needed:
            needed.update(_calls(binding.value))
    for binding in order:
        value = binding.value
        if binding.var in depends and binding.var in needed and isinstance(value, relax.Call) \
                and _carries_gradient(binding.var.ty) and not _has_gradient(value):
            raise NotDifferentiable(binding.var, _describe(value))


def vjp_module(mod: tvm.IRModule, name: str, requires: tuple[bool, ...], outputs: tuple[bool, ...]) -> tvm.IRModule:
    """A module whose function `<name>_backward(params..., grad of each differentiated output)` returns
    the gradient of each parameter in `requires` (one tensor, or a tuple of them)."""
    forward = mod[name]
    check(forward, requires, outputs)
    # Gradient differentiates only dtypes TVM calls floating point, which bfloat16 is not: such a
    # parameter enters the VJP as float32, converted to bfloat16 (exactly) before the forward
    widened = [r and isinstance(p.ty, relax.TensorType) and str(p.ty.dtype) == "bfloat16"
               for p, r in zip(forward.params, requires)]
    params = [relax.Var(p.name, relax.TensorType(p.ty.shape, "float32", p.ty.vdevice) if w else p.ty)
              for p, w in zip(forward.params, widened)]
    ret = forward.ret_ty
    many = isinstance(ret, relax.TupleType)   # NB: a one-result tuple is many too (grad_params agrees)
    types = list(ret.fields) if many else [ret]
    grads = [relax.Var(f"d_out{i}" if many else "d_out", t) for i, t in enumerate(types) if outputs[i]]
    backward = f"{name}_backward"
    vjp = f"{name}_vjp"
    bb = relax.BlockBuilder(mod)
    with bb.function(vjp, params + grads, private=False):
        with bb.dataflow():
            args = [bb.emit(relax.op.astype(p, "bfloat16")) if w else p for p, w in zip(params, widened)]
            result = bb.emit(relax.Call(bb.get().get_global_var(name), args))
            total, k = None, 0
            for i, wanted in enumerate(outputs):
                if not wanted:
                    continue
                out = bb.emit(relax.TupleGetItem(result, i)) if many else result
                term = bb.emit(relax.op.sum(relax.op.multiply(out, grads[k])))
                k += 1
                if term.ty.dtype != "float32":  # the value is dead code; its dtype only has to agree
                    term = bb.emit(relax.op.astype(term, "float32"))
                total = term if total is None else bb.emit(relax.op.add(total, term))
            total = bb.emit_output(total)
        bb.emit_func_output(total)
    built = bb.get()
    # the forward becomes private so that InlinePrivateFunctions copies its body into the VJP
    functions = {gv: (fn.without_attr("global_symbol") if gv.name_hint == name else fn)
                 for gv, fn in built.functions.items()}
    built = tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
    built = relax.transform.InlinePrivateFunctions()(built)
    built = relax.transform.ConvertToDataflow()(built)
    fn = built[vjp]
    wrt = [p for p, r in zip(fn.params, requires) if r]
    try:
        with quiet_tvm():  # a declined rule leaves Gradient's builder unfinished, which TVM logs
            built = relax.transform.Gradient(vjp, require_grads=wrt)(built)
    except Exception as e:  # noqa: BLE001 - a rule that declined (gradients.decline) raises through TVM
        declined = gradients.take_declined()
        if declined is None:  # a rule that failed: never a wrong gradient, the fallback's
            if debug_enabled():
                raise
            raise NotDifferentiable(None, f"a failure of TVM's Gradient pass ({type(e).__name__}; set "
                                          "BABYTRITON_DEBUG=1 to see it)") from None
        name, op_name, what = declined
        var = next((b.var for block in forward.body.blocks for b in block.bindings if b.var.name == name
                    and isinstance(b.value, relax.Call) and getattr(b.value.op, "name", None) == op_name), None)
        raise NotDifferentiable(var, what) from None
    adjoint = built[f"{vjp}_adjoint"]
    body = adjoint.body
    grads_out = body.body.fields[1]   # (value, (grads...)): the value is dropped, and its code with it
    bindings, fields, new_params = list(body.blocks[0].bindings), list(grads_out.fields), list(adjoint.params)
    if any(widened):  # the widened parameters come in as bfloat16 and their gradients leave as it
        for i, (p, w) in enumerate(zip(adjoint.params, widened + [False] * len(grads))):
            if w:
                new_params[i] = relax.Var(p.name, forward.params[i].ty)
                bindings.insert(0, relax.VarBinding(p, relax.op.astype(new_params[i], "float32")))
        for j, (field, w) in enumerate(zip(fields, [w for w, r in zip(widened, requires) if r])):
            if w:
                narrow = relax.TensorType(field.ty.shape, "bfloat16", field.ty.vdevice)
                fields[j] = relax.Var(f"{field.name}_bf16", narrow)
                bindings.append(relax.VarBinding(fields[j], relax.op.astype(field, "bfloat16")))
    result = fields[0] if len(wrt) == 1 else relax.Tuple(fields)
    block = relax.DataflowBlock(bindings)
    ty = fields[0].ty if len(wrt) == 1 else relax.TupleType([f.ty for f in fields])
    new = relax.Function(new_params, relax.SeqExpr([block], result), ty, adjoint.is_pure)
    new = new.with_attr("global_symbol", backward)
    out = tvm.IRModule({tvm.ir.GlobalVar(backward): new}, attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, f in mod.functions.items():  # the PrimFuncs (user kernels) the forward called
        if not isinstance(f, relax.Function):
            out[gv] = f
    out = relax.transform.DeadCodeElimination([backward])(out)
    return relax.transform.Normalize()(out)


def lines(mod: tvm.IRModule, forward_lines: dict) -> dict:
    """The source line of each binding of a backward module, by name: the forward's values keep their
    names when inlined, and Gradient names an adjoint `<value>_adjoint...` (a value's gradient comes
    from the line that computed the value)."""
    by_name = {var.name: line for var, line in forward_lines.items()}
    out = {}
    for fn in mod.functions.values():
        if not isinstance(fn, relax.Function):
            continue
        for block in fn.body.blocks:
            for binding in block.bindings:
                name = binding.var.name
                base = name.split("_adjoint")[0]
                line = by_name.get(name, by_name.get(base))
                if line is not None:
                    out[binding.var] = line
    return out
