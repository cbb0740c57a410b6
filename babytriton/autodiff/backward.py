"""Reverse mode: the backward of a generated Relax function, through TVM's `relax.transform.Gradient`.

The vector-Jacobian product of `outs = f(params)` for incoming gradients `dys` is the gradient of the
scalar `sum_i sum(outs[i] * dys[i])` with respect to the parameters that need one: `vjp_module` writes
that scalar after f's body, lets Gradient differentiate it, and keeps only the gradients. The result is
an ordinary Relax function `<name>_backward(params..., dys...)`: the pipeline legalizes, fuses,
schedules and builds it like a forward. It recomputes the forward's values inside the same kernels,
except, with `save`, the small ones (`saved_values`: row statistics), which it takes from the
forward call, whose training forward `<name>_forward_saving` returns them.

Gradient takes one dataflow block of ops that each have a registered gradient (`FPrimalGradient`);
`check` finds the first construct on the way from a differentiated parameter to a differentiated output
that breaks that (a run-time `if` or loop, an op without a gradient, a TensorIR kernel without a
@bt.grad_for gradient). A kernel with one becomes `call_tir_with_grad`, whose gradient rule writes the
gradient function's Relax in place. Gradient takes float16/32/64 parameters only: a bfloat16 one is
differentiated as float32 converted to bfloat16 (exact), and a half matmul accumulating in float32 is
written as the float32 matmul of its converted operands (the same values) for matmul's rule.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.analysis import free_vars

from . import gradients  # registers the gradients TVM lacks or computes unlike torch
from ..passes import shifts
from ..core.errors import debug_enabled, quiet_tvm
from ..core.types import is_float_dtype


@dataclass
class NotDifferentiable(Exception):
    """Why Gradient cannot differentiate a function: `var` is the binding at fault (its line), or None."""
    var: relax.Var | None
    what: str
    node: object = None   # the user's expression (set by the backend, which knows the lines)
    kernel: object = None  # a TensorIR kernel at fault: its GlobalVar here, the user's PrimFunc once the backend sets it

    def __str__(self):
        return self.what


def _has_gradient(call: relax.Call) -> bool:
    op = call.op
    return isinstance(op, tvm.ir.Op) and op.get_attr("FPrimalGradient") is not None


_KERNEL_CALLS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")


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
        if op.name in _KERNEL_CALLS:
            kernel = call.args[0]
            name = getattr(kernel, "name_hint", None) or str(kernel)
            return f"the TensorIR kernel `{name}`"
        return f"`{op.name.removeprefix('relax.')}`, which has no registered gradient"
    return "a call of another function (a run-time loop)"


def _calls_function(expr) -> bool:
    """Whether an If's branches call a Relax function (the code generator's loops are such calls)."""
    found = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, relax.GlobalVar):
            found.append(node)

    relax.analysis.post_order_visit(expr, visit)
    return bool(found)


def check(fn: relax.Function, requires: tuple[bool, ...], outputs: tuple[bool, ...],
          kernel_grads=None) -> None:
    """Raise NotDifferentiable for the first binding Gradient cannot take: any run-time `if` or loop
    (Gradient needs one dataflow block), else an op without a gradient or a kernel on the way from a
    differentiated parameter to a differentiated output."""
    blocks = fn.body.blocks
    order = [b for block in blocks for b in block.bindings]
    for binding in order:
        value = binding.value
        if isinstance(value, relax.If):
            if _calls_function(value):   # a run-time `for`/`while` is an If around its loop function's call
                raise NotDifferentiable(binding.var, "a run-time loop (the backward needs straight-line code)")
            raise NotDifferentiable(binding.var, "a run-time `if` (the backward needs straight-line code)")
        if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
            raise NotDifferentiable(binding.var, "a run-time loop (the backward needs straight-line code)")
    live = {p for p, r in zip(fn.params, requires) if r}
    depends: dict = {}
    for binding in order:
        if any(v in live for v in free_vars(binding.value)):
            live.add(binding.var)
            depends[binding.var] = binding
    body = fn.body.body
    results = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    wanted = {v for v, w in zip(results, outputs) if w and isinstance(v, relax.Var)}
    needed = set(wanted)
    for binding in reversed(order):
        if binding.var in needed:
            needed.update(free_vars(binding.value))
    for binding in order:
        value = binding.value
        if binding.var in depends and binding.var in needed and isinstance(value, relax.Call) \
                and _carries_gradient(binding.var.ty) and not _has_gradient(value):
            kernel = value.args[0] if isinstance(value.op, tvm.ir.Op) and value.op.name in _KERNEL_CALLS else None
            if kernel is not None and kernel_grads is not None and kernel_grads(kernel, value) is not None:
                continue   # a kernel whose @bt.grad_for gradient is spliced in
            raise NotDifferentiable(binding.var, _describe(value), kernel=kernel)


# Names of the bindings vjp_module adds around the forward: never a name the code generator gives
# (its temporaries are gv*, user variables keep their names), so `lines` cannot confuse them.
_TERM, _TOTAL, _WIDE = "vjp_term", "vjp_total", "vjp_wide"


@relax.expr_functor.mutator
class _WidenMatmul(relax.PyExprMutator):
    """`matmul(a, b, out_dtype=float32)` of half tensors (the code generator's accumulate-in-float32
    form) as `matmul(float32(a), float32(b))`: the same values (a half converts exactly), in the
    form matmul's registered gradient takes (it assumes one dtype throughout)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul":
            out = call.attrs.out_dtype
            out = "" if out is None else str(out)
            a, b = call.args
            if out not in ("", "void", "None") and (a.ty.dtype != out or b.ty.dtype != out):
                wide = [self.builder_.emit(relax.op.astype(x, out)) if x.ty.dtype != out else x for x in (a, b)]
                return relax.op.matmul(*wide)
        return call


_SPLICES = itertools.count()


@relax.expr_functor.mutator
class _KernelGradients(relax.PyExprMutator):
    """Each `call_tir` of a kernel that has a @bt.grad_for gradient as `call_tir_with_grad`, whose
    gradient rule writes the Relax of the @jit gradient function in place (see `_register_splice`).
    `kernel_grads(gvar, call)` gives that function (straight-line Relax, calling no kernel), or None."""

    def __init__(self, mod: tvm.IRModule, kernel_grads):
        super().__init__(mod)
        self.kernel_grads = kernel_grads

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"):
            return call
        kernel = call.args[0]
        grad = self.kernel_grads(kernel, call)
        if grad is None:
            return call
        name = f"babytriton_{kernel.name_hint}_{next(_SPLICES)}"   # unique: threads compile at once
        _register_splice(name, grad, call)
        out = call.ty_args[0]
        out_ty = list(out.fields) if isinstance(out, relax.TupleType) else out
        return relax.op.call_tir_with_grad(kernel, call.args[1], out_ty, te_grad_name=name)


@relax.expr_functor.mutator
class _Substitute(relax.PyExprMutator):
    """Reads of remapped vars replaced (`set_var_remap`), nothing else changed."""


def _register_splice(name: str, grad: relax.Function, call) -> None:
    """Gradient's rule for `call_tir_with_grad(..., te_grad_name=name)`: the bindings of `grad` (the
    gradient function, called with the kernel's inputs and the gradient of each float output),
    written into the backward, each named as an adjoint of the kernel's result (the fusion map gives
    them the call's line); its result (one gradient per float input) as the tuple of every input's
    gradient, zeros for the others."""
    inputs = list(call.args[1].fields)
    floats = [i for i, a in enumerate(inputs) if a.ty.dtype in ("float16", "bfloat16", "float32", "float64")]

    def handler(orig_var, orig_call, output_grad, ctx):
        sub = _Substitute()
        outs = [output_grad]
        if isinstance(output_grad.ty, relax.TupleType):
            outs = [ctx.emit(relax.TupleGetItem(output_grad, i)) for i in range(len(output_grad.ty.fields))]
        outs = [g for g in outs if g.ty.dtype in ("float16", "bfloat16", "float32", "float64")]
        for p, a in zip(grad.params, [*orig_call.args[1].fields, *outs]):
            sub.set_var_remap(p, a)
        for block in grad.body.blocks:
            for binding in block.bindings:
                new = ctx.emit(sub.visit_expr(binding.value), name_hint=f"{orig_var.name}_adjoint")
                sub.set_var_remap(binding.var, new)
        got = sub.visit_expr(grad.body.body)
        fields = list(got.fields) if isinstance(got, relax.Tuple) else \
            [ctx.emit(relax.TupleGetItem(got, k)) for k in range(len(floats))] if len(floats) > 1 else [got]
        grads = [fields[floats.index(i)] if i in floats else ctx.emit(relax.op.zeros(a.ty.shape, a.ty.dtype))
                 for i, a in enumerate(orig_call.args[1].fields)]
        return ctx.emit(relax.Tuple(grads))

    tvm_ffi.register_global_func(f"tvm.relax.te_grad._register.{name}", handler, override=True)


def vjp_module(mod: tvm.IRModule, name: str, requires: tuple[bool, ...], outputs: tuple[bool, ...],
               kernel_grads=None, save: bool = False, device_kind: str = "cpu") -> tvm.IRModule:
    """A module whose function `<name>_backward(params..., grad of each differentiated output)` returns
    the gradient of each parameter in `requires` (one tensor, or a tuple of them). `kernel_grads(gvar,
    call)` gives the Relax module and function name of a kernel's gradient, or None.

    With `save`, the small forward values the backward reads (`saved_values`) are taken from the
    forward call instead of recomputed: the module also holds `<name>_forward_saving(params...)`
    returning (the forward's result, (saved...)), and the backward takes (params..., saved..., grads...).
    When no value qualifies, the module is the one without `save`."""
    mod = shifts.detach(mod, name)   # a max that only shifts a softmax has a zero gradient
    forward = mod[name]
    check(forward, requires, outputs, kernel_grads)
    params = [relax.Var(p.name, p.ty) for p in forward.params]
    # Gradient differentiates float16/32/64 parameters only: a bfloat16 one enters the VJP as float32
    # and is converted back to bfloat16 before the forward reads it (exact both ways), its gradient
    # converted to bfloat16 at the end: the gradient is the bfloat16 computation's.
    widened = [r and isinstance(p.ty, relax.TensorType) and p.ty.dtype == "bfloat16"
               for p, r in zip(params, requires)]
    many = isinstance(forward.ret_ty, relax.TupleType)   # NB: a one-result tuple is many too (grad_params agrees)
    vjp = f"{name}_vjp"
    built = _vjp_function(mod, name, vjp, params, widened, outputs, many)
    built = _inline_forward(built, mod, name, vjp, kernel_grads)
    wrt = [p for p, r in zip(built[vjp].params, requires) if r]
    built = _differentiate(built, vjp, wrt, forward, device_kind)
    adjoint = _Adjoint.of(built, vjp, many)
    adjoint.narrow_bfloat16(params, widened, requires)
    training = adjoint.save_small_values(len(params), name) if save else None
    return _backward_module(mod, name, adjoint, len(wrt) == 1, training)


def _vjp_function(mod: tvm.IRModule, name: str, vjp: str, params: list, widened: list, outputs: tuple,
                  many: bool) -> tvm.IRModule:
    """`mod` with `<name>_vjp(params..., grads...)` returning (sum_i sum(out_i * grad_i), the forward's
    results...): the scalar whose gradient is the VJP (bfloat16 parameters taken as float32)."""
    vjp_params = [relax.Var(p.name, relax.TensorType(p.ty.shape, "float32")) if w else p
                  for p, w in zip(params, widened)]
    types = list(mod[name].ret_ty.fields) if many else [mod[name].ret_ty]
    grads = [relax.Var(f"d_out{i}" if many else "d_out", t) for i, t in enumerate(types) if outputs[i]]
    bb = relax.BlockBuilder(mod)
    with bb.function(vjp, vjp_params + grads, private=False):
        with bb.dataflow():
            inputs = [bb.emit(relax.op.astype(v, "bfloat16"), name_hint=_WIDE) if w else v
                      for v, w in zip(vjp_params, widened)]
            result = bb.emit(relax.Call(bb.get().get_global_var(name), inputs), name_hint=_TERM)
            total = bb.emit_output(_total(bb, result, grads, outputs, many), name_hint=_TOTAL)
        # the forward's results returned after the total (Gradient differentiates the first field):
        # the training forward reads them from the adjoint
        results = [bb.emit(relax.TupleGetItem(result, i), name_hint=_TERM) for i in range(len(types))] \
            if many else [result]
        bb.emit_func_output(relax.Tuple([total, *results]))
    return bb.get()


def _total(bb: relax.BlockBuilder, result, grads: list, outputs: tuple, many: bool):
    """sum_i sum(out_i * grad_i) over the differentiated outputs, in float32."""
    total, k = None, 0
    for i, wanted in enumerate(outputs):
        if not wanted:
            continue
        out = bb.emit(relax.TupleGetItem(result, i), name_hint=_TERM) if many else result
        term = bb.emit(relax.op.multiply(out, grads[k]), name_hint=_TERM)
        term = bb.emit(relax.op.sum(term), name_hint=_TERM)
        k += 1
        if term.ty.dtype != "float32":  # the value is dead code; its dtype only has to agree
            term = bb.emit(relax.op.astype(term, "float32"), name_hint=_TERM)
        total = term if total is None else bb.emit(relax.op.add(total, term), name_hint=_TERM)
    return total


def _inline_forward(built: tvm.IRModule, mod: tvm.IRModule, name: str, vjp: str, kernel_grads) -> tvm.IRModule:
    """The VJP with the forward's body copied in, as one dataflow block Gradient can differentiate."""
    # the forward becomes private so that InlinePrivateFunctions copies its body into the VJP
    functions = {gv: (fn.without_attr("global_symbol") if gv.name_hint == name else fn)
                 for gv, fn in built.functions.items()}
    built = tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
    built = relax.transform.InlinePrivateFunctions()(built)
    built = relax.transform.ConvertToDataflow()(built)
    built[vjp] = _WidenMatmul().visit_expr(built[vjp])
    if kernel_grads is not None:
        built[vjp] = _KernelGradients(built, kernel_grads).visit_expr(built[vjp])
    return relax.transform.Normalize()(built)


def _differentiate(built: tvm.IRModule, vjp: str, wrt: list, forward: relax.Function,
                   device_kind: str) -> tvm.IRModule:
    """TVM's Gradient of the VJP with respect to `wrt`; NotDifferentiable at the forward's binding
    whose gradient rule declined, or for a failure of the pass."""
    try:
        with quiet_tvm(), gradients.on_device(device_kind):  # a declined rule leaves Gradient's builder
            return relax.transform.Gradient(vjp, require_grads=wrt)(built)   # unfinished, which TVM logs
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


@dataclass
class _Adjoint:
    """The backward as Gradient wrote it (`<vjp>_adjoint`), being rewritten into `<name>_backward`."""
    bindings: list        # the forward's bindings (copied by Gradient) first, then the VJP's
    params: list
    grads: list           # the gradient of each differentiated parameter
    forward_count: int    # how many of the bindings are forward code
    forward_result: object
    is_pure: bool

    @classmethod
    def of(cls, built: tvm.IRModule, vjp: str, many: bool) -> _Adjoint:
        adjoint = built[f"{vjp}_adjoint"]
        body = adjoint.body
        bindings = list(body.blocks[0].bindings)
        return cls(bindings, list(adjoint.params),
                   list(body.body.fields[1].fields),  # (value, (grads...)): the value is dropped, and its code with it
                   sum(len(b.bindings) for b in built[vjp].body.blocks),   # Gradient copies them first
                   _forward_result(bindings, body.body.fields[0], many), adjoint.is_pure)

    def narrow_bfloat16(self, params: list, widened: list, requires: tuple) -> None:
        """Each bfloat16 parameter converted to the float32 one the adjoint reads, its gradient back."""
        count = len(self.bindings)
        for i, (p, w) in enumerate(zip(params, widened)):
            if w:
                self.bindings.insert(0, relax.VarBinding(self.params[i], relax.op.astype(p, "float32")))
                self.params[i] = p
                j = sum(requires[:i])
                narrow = relax.Var(f"{p.name}_adjoint_out", p.ty)
                self.bindings.append(relax.VarBinding(narrow, relax.op.astype(self.grads[j], "bfloat16")))
                self.grads[j] = narrow
        self.forward_count += len(self.bindings) - count   # the bfloat16 conversions are forward code

    def save_small_values(self, n: int, name: str) -> relax.Function | None:
        """The training forward returning the small values the backward reads (saved_values), which
        become parameters after the first `n`; None (nothing changed) when none qualifies."""
        seeded = set(self.params[n:])   # the forward's own bindings: not the VJP's products with the gradients
        forward_part = []
        for b in self.bindings[:self.forward_count]:
            if any(v in seeded for v in free_vars(b.value)):
                seeded.add(b.var)
            else:
                forward_part.append(b)
        saved = saved_values(forward_part, self.bindings[self.forward_count:], self.grads, self.params[:n])
        if not saved:
            return None
        training = _training_forward(self.params[:n], forward_part, self.forward_result, saved, name)
        sub = _Substitute()
        inputs = [relax.Var(f"saved_{v.name}", v.ty) for v in saved]
        for v, p in zip(saved, inputs):
            sub.set_var_remap(v, p)
        kept = set(saved)
        self.bindings = [relax.VarBinding(b.var, sub.visit_expr(b.value)) for b in self.bindings if b.var not in kept]
        self.grads = [sub.visit_expr(g) for g in self.grads]
        self.params = self.params[:n] + inputs + self.params[n:]
        return training


def _backward_module(mod: tvm.IRModule, name: str, adjoint: _Adjoint, single: bool,
                     training: relax.Function | None) -> tvm.IRModule:
    """`<name>_backward` (and the training forward) with the kernels the forward called, cleaned up."""
    backward = f"{name}_backward"
    if single:
        result, result_ty = adjoint.grads[0], adjoint.grads[0].ty
    else:
        result, result_ty = relax.Tuple(adjoint.grads), relax.TupleType([v.ty for v in adjoint.grads])
    block = relax.DataflowBlock(_without_seed(adjoint.bindings, result))
    new = relax.Function(adjoint.params, relax.SeqExpr([block], result), result_ty, adjoint.is_pure)
    new = new.with_attr("global_symbol", backward)
    out = tvm.IRModule({tvm.ir.GlobalVar(backward): new}, attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, f in mod.functions.items():  # the PrimFuncs (user kernels) the forward called
        if not isinstance(f, relax.Function):
            out[gv] = f
    entries = [backward]
    if training is not None:
        out[tvm.ir.GlobalVar(f"{name}_forward_saving")] = training
        entries.append(f"{name}_forward_saving")
    for entry in entries:
        out[entry] = shifts.attach(out[entry])
    out = relax.transform.CanonicalizeBindings()(out)
    out = relax.transform.DeadCodeElimination(entries)(out)
    return relax.transform.Normalize()(out)


# A forward value is saved for the backward when it is at most 1/SMALL of the largest input (a row
# statistic: max, sum, mean, rstd, logsumexp of shape (rows, 1)); bigger ones are recomputed.
SMALL = 8


def _numel(ty) -> int | None:
    if not isinstance(ty, relax.TensorType) or ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    n = 1
    for d in ty.shape.values:
        if not isinstance(getattr(d, "value", None), int):
            return None
        n *= int(d)
    return n


def saved_values(forward: list, adjoint: list, grads_out: list, params: list) -> list:
    """The forward values the backward takes from the forward call: walking back from what the
    adjoint bindings read, the first *small* value (`SMALL`) on each path whose computation reads a
    big tensor; the big values on the way are recomputed from the inputs and the saved ones."""
    sizes = [n for n in (_numel(p.ty) for p in params) if n]
    if not sizes:
        return []
    largest = max(sizes)
    defs = {b.var: b.value for b in forward}

    def small(v) -> bool:
        n = _numel(v.ty)
        return n is not None and n * SMALL <= largest and is_float_dtype(str(v.ty.dtype))

    heavy: dict = {}   # forward var -> its computation reads a tensor that is not small
    big_params = {p for p in params if (_numel(p.ty) or 0) * SMALL > largest}
    for b in forward:
        heavy[b.var] = any(a in big_params or (a in defs and (heavy[a] or _numel(a.ty) is None
                                                            or _numel(a.ty) * SMALL > largest))
                           for a in free_vars(b.value))
    wanted = [v for b in adjoint for v in free_vars(b.value) if v in defs]
    wanted += [v for g in grads_out for v in free_vars(g) if v in defs]
    saved, seen = [], set()
    while wanted:
        v = wanted.pop()
        if v in seen:
            continue
        seen.add(v)
        if small(v) and heavy[v]:
            saved.append(v)
        else:
            wanted.extend(a for a in free_vars(defs[v]) if a in defs)
    order = {b.var: i for i, b in enumerate(forward)}
    return sorted(saved, key=order.__getitem__)


def _forward_result(bindings: list, value, many: bool):
    """The forward's result in the adjoint (a var, or a tuple of them): the fields after the total of
    the VJP's returned tuple (`value`, or the tuple a var of it is bound to)."""
    if isinstance(value, relax.Var):
        value = next((b.value for b in bindings if b.var.same_as(value)), value)
    fields = list(value.fields[1:])
    return relax.Tuple(fields) if many else fields[0]


def _training_forward(params: list, forward: list, result, saved: list, name: str) -> relax.Function:
    """`<name>_forward_saving(params...)`: the forward's bindings (as Gradient copied them into the
    adjoint) returning (the forward's result, (saved values...))."""
    sub = _Substitute()
    bb = relax.BlockBuilder()
    new_params = [relax.Var(p.name, p.ty) for p in params]
    for p, q in zip(params, new_params):
        sub.set_var_remap(p, q)
    with bb.function(f"{name}_forward_saving", new_params, private=False):
        with bb.dataflow():
            for b in forward:
                sub.set_var_remap(b.var, bb.emit(sub.visit_expr(b.value), name_hint=b.var.name))
            out = bb.emit_output(relax.Tuple([sub.visit_expr(result), relax.Tuple([sub.visit_expr(v) for v in saved])]))
        bb.emit_func_output(out)
    return bb.get()[f"{name}_forward_saving"]


def _base(name: str) -> str | None:
    """The value an adjoint binding is the gradient of: `y_adjoint`, `y_adjoint2`, `y_adjoint_out` -> y."""
    head, sep, tail = name.rpartition("_adjoint")
    return head if sep and (tail in ("", "_out") or tail.isdigit()) else None


_ONE_PRESERVING = ("relax.broadcast_to", "relax.astype", "relax.reshape", "relax.expand_dims")


def _without_seed(bindings, result) -> list:
    """The bindings with each product by Gradient's seed made an alias of the other factor. Gradient
    starts from `ones(())`, broadcasts it back through `sum` and multiplies it by d_out: as a kernel,
    a full-size copy of d_out that every consumer of the output's adjoint reads instead of d_out.
    A product that is itself a gradient returned (`x + y`'s) stays: a returned gradient must be a
    tensor of its own, never the caller's d_out."""
    returned = {v for v in (result.fields if isinstance(result, relax.Tuple) else [result]) if isinstance(v, relax.Var)}
    for binding in reversed(bindings):  # and what they alias
        if binding.var in returned and isinstance(binding.value, relax.Var):
            returned.add(binding.value)
    ones, out = set(), []
    for binding in bindings:
        value = binding.value
        if isinstance(value, relax.Var) and value in ones:
            ones.add(binding.var)
        elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            name = value.op.name
            if name in ("relax.ones", "relax.ones_like") or (name in _ONE_PRESERVING and value.args[0] in ones):
                ones.add(binding.var)
            elif name == "relax.multiply" and binding.var not in returned:
                for one, other in (value.args, reversed(value.args)):
                    if one in ones and isinstance(other, relax.Var) and \
                            tvm_ffi.structural_equal(other.ty, binding.var.ty):
                        binding = relax.VarBinding(binding.var, other)
                        break
        out.append(binding)
    return out


def lines(mod: tvm.IRModule, forward_lines: dict) -> dict:
    """The source line of each binding of a backward module. Gradient emits a copy of the forward's
    bindings (which keep their names), then the adjoints, each named `<value>_adjoint...` (a value's
    gradient comes from the line that computed the value), with temporaries (`lv`, ...) between
    them. A binding whose line its name does not give (a temporary, the adjoint of the VJP's own sum)
    takes the line of the first binding with a line that it feeds, else of the one it follows."""
    by_name = {var.name: line for var, line in forward_lines.items()}
    out = {}
    for fn in mod.functions.values():
        if not isinstance(fn, relax.Function):
            continue
        order = [b for block in fn.body.blocks for b in block.bindings]
        first = next((i for i, b in enumerate(order) if _base(b.var.name) is not None), len(order))
        named = {}
        for i, binding in enumerate(order):
            name = binding.var.name
            line = by_name.get(name) if i < first else by_name.get(_base(name) or "")
            if line is not None:
                named[binding.var] = line
        readers: dict = {}      # var -> the bindings that read it
        for binding in order:
            for v in free_vars(binding.value):
                readers.setdefault(v, []).append(binding.var)
        resolved = dict(named)
        for binding in reversed(order):   # a reader comes later: its line is settled first
            var = binding.var
            if var in resolved:
                continue
            fed = [resolved[r] for r in readers.get(var, []) if r in resolved]
            if fed:
                resolved[var] = fed[0]
        previous = None
        for binding in order:
            line = resolved.get(binding.var, previous)
            if line is not None:
                out[binding.var] = previous = line
    return out
