"""Parameters updated in place are written where they are (`p.add_(g)`, an optimizer step).

codegen/mutation.py returns a parameter's new value as an extra result and the driver copies it into
the caller's tensor: for an update that reads p and g and writes p, that copy is half as much memory
traffic again. Where it is safe by the kernel's structure, the kernel that computes the new value
writes it into the parameter itself (`call_tir_inplace`) and the driver finds nothing to copy:
- the value is one result of a kernel that takes the parameter once, with its shape and dtype, and no
  later binding reads the parameter;
- every block of that kernel is element-wise at its own index for the parameter, the result and every
  buffer computed from the parameter (`p[i]` is read only where element i is written), every read of
  the parameter comes before the block that writes its new value: no element is read after a thread
  or loop has overwritten it. The rewrite runs after scheduling (lowering/pipeline.py): the rules
  schedule a kernel computing new values, as TVM's vectorize, parallel, bind and compute_at refuse a
  block that reads and writes one buffer; so a new value read back (`buf.mul_(m).add_(g); p.add_(buf)`
  reads buf's) is read where it was written, by the same thread's element or a later loop nest, and
  no rule stages the parameter's old values for that read any more: buf goes in place too.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..codegen.mutation import WRITTEN  # main's attribute: the parameters its trailing results update


def write_in_place(mod: tvm.IRModule) -> tvm.IRModule:
    """Every function's parameter updates that can be, written in place; the kernels are scheduled."""
    if "vdevice" in mod.global_infos:  # kernels are placed on devices by call_tir later (PlaceOnDevices)
        return mod
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function) and func.attrs is not None and WRITTEN in func.attrs:
            mod = _function(mod, gvar, func, [str(n) for n in func.attrs[WRITTEN]])
    return mod


def _function(mod, gvar, func, written: list[str]):
    body = func.body
    bindings = [b for block in body.blocks for b in block.bindings]
    ret = body.body
    if not isinstance(ret, relax.Tuple) or len(ret.fields) != 1 + len(written) \
            or any(isinstance(b.value, relax.If) for b in bindings):
        return mod
    params = {p.name: p for p in func.params}
    plans: dict[int, dict[int, int]] = {}   # binding index -> {result index: argument index}
    for name, value in zip(written, ret.fields[1:]):
        found = _producer(bindings, value)
        if found is not None and name in params:
            at, result = found
            argument = _taken_once(bindings[at].value, params[name], result)
            if argument is not None and not _read_after(bindings, at, params[name]):
                plans.setdefault(at, {})[result] = argument
    replaced = {}
    for at, pairs in plans.items():
        call = bindings[at].value
        kernel = mod[call.args[0]]
        inputs = len(call.args[1].fields)
        pairs = {r: a for r, a in pairs.items() if _safe(kernel, kernel.params[a], kernel.params[inputs + r])}
        if pairs and _called_once(mod, call.args[0]):
            # a new GlobalVar: the old one's type still has the parameters the kernel no longer takes
            old = call.args[0]
            functions = {g: f for g, f in mod.functions_items() if not g.same_as(old)}
            builder = relax.BlockBuilder(tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos))
            new = builder.add_func(_kernel_in_place(kernel, inputs, pairs), old.name_hint)
            mod = builder.get()
            replaced[at] = _call_in_place(new, call, pairs)
    if not replaced:
        return mod
    mod[gvar] = _rebuilt(func, replaced)
    return mod


def _producer(bindings, value):
    """(index of the kernel call's binding, which of its results) that `value` is, or None."""
    index = {b.var: i for i, b in enumerate(bindings)}
    if not isinstance(value, relax.Var) or value not in index:
        return None
    bound = bindings[index[value]].value
    if isinstance(bound, relax.TupleGetItem) and bound.tuple_value in index:
        at = index[bound.tuple_value]
        call = bindings[at].value
        return (at, bound.index) if _is_call_tir(call) and isinstance(call.ty_args[0], relax.TupleType) else None
    return (index[value], 0) if _is_call_tir(bound) and isinstance(bound.ty_args[0], relax.TensorType) else None


def _is_call_tir(value) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.call_tir")) \
        and len(value.args) == 2


def _taken_once(call, param, result: int):
    """The argument position of `param` in the call, when it is there once with the result's type."""
    places = [i for i, a in enumerate(call.args[1].fields) if a.same_as(param)]
    out = call.ty_args[0]
    out = out.fields[result] if isinstance(out, relax.TupleType) else out
    if len(places) != 1 or not tvm_ffi.structural_equal(out, param.ty):
        return None
    shape = out.shape.values if out.shape is not None else []
    return None if any(isinstance(d, tirx.IntImm) and int(d) == 0 for d in shape) else places[0]


def _read_after(bindings, at: int, param) -> bool:
    """Whether a binding after the call reads `param` (it would see the new value)."""
    seen = []
    for b in bindings[at + 1:]:
        tvm_ffi.structural_walk(b.value, (relax.Var, lambda v: seen.append(v.same_as(param))))
    return any(seen)


def _called_once(mod, kernel_gvar) -> bool:
    calls = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func, (tvm.ir.GlobalVar, lambda g: calls.append(g.same_as(kernel_gvar))))
    return sum(calls) == 1


def _safe(kernel: tirx.PrimFunc, param_in, param_out) -> bool:
    """Whether the scheduled kernel can write its output `param_out` into its input `param_in`: see the
    module (the new value may be read back, at its own index)."""
    x, y = param_in, param_out   # a kernel's parameters are its buffers
    tainted = [x]   # buffers whose values come from x
    written_y = False
    for block in _blocks(kernel):
        reads, writes = _accesses(block)
        if written_y and any(b.same_as(x) for b, _ in reads):
            # x read after it is written: the schedule may hold an input in a register from the kernel's
            # start (read once for every block), which would then be stale
            return False
        from_x = any(any(b.same_as(t) for t in tainted) for b, _ in reads)
        for buffer, indices in reads + writes:
            watched = buffer.same_as(y) or any(buffer.same_as(t) for t in tainted) or (
                from_x and any(buffer.same_as(w) for w, _ in writes))
            if watched and not _own_index(block, buffer, indices, y):
                return False
        if from_x:
            tainted += [w for w, _ in writes]
        written_y = written_y or any(b.same_as(y) for b, _ in writes)
    return written_y


def _blocks(kernel) -> list:
    """The kernel's blocks in program order, its root block (allocations only) left out."""
    found = []
    tvm_ffi.structural_walk(kernel.body, (s_tir.SBlock, found.append))
    return [b for b in found if b.iter_vars or b.name_hint != "root"]


def _accesses(block):
    """(buffer, indices) of every load and of every store in the block's body."""
    loads, stores = [], []
    tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, lambda n: loads.append((n.source, list(n.indices)))))
    tvm_ffi.structural_walk(block.body, (tirx.BufferStore, lambda n: stores.append((n.buffer, list(n.indices)))))
    return loads, stores


def _own_index(block, buffer, indices, like) -> bool:
    """An access at exactly the block's own spatial index over `like`'s whole shape."""
    ivs = list(block.iter_vars)
    if any(iv.iter_type != tirx.IterVar.DataPar for iv in ivs) or len(ivs) != len(indices):
        return False
    shape = list(like.ty.shape)
    return len(buffer.ty.shape) == len(shape) and all(
        index.same_as(iv.var) and tvm_ffi.structural_equal(iv.dom.extent, n) and tvm_ffi.structural_equal(b, n)
        for index, iv, n, b in zip(indices, ivs, shape, buffer.ty.shape))


def _kernel_in_place(kernel, inputs: int, pairs: dict[int, int]):
    """The kernel with each result of `pairs` stored into its input's buffer, that result's parameter gone."""
    remap = [(kernel.params[inputs + r], kernel.params[a]) for r, a in pairs.items()]
    body = tvm_ffi.structural_map(kernel.body, [(tvm.ir.Var, lambda v: next(
        (new for old, new in remap if v.same_as(old)), v))])
    dropped = {inputs + r for r in pairs}
    params = [p for i, p in enumerate(kernel.params) if i not in dropped]
    return tirx.PrimFunc(params, body, kernel.ret_type, kernel.attrs, kernel.span)


def _call_in_place(kernel_gvar, call, pairs: dict[int, int]):
    out = call.ty_args[0]
    results = len(out.fields) if isinstance(out, relax.TupleType) else 1
    indices = [pairs.get(r, -1) for r in range(results)]
    return relax.op.call_tir_inplace(kernel_gvar, call.args[1], indices,
                                     list(out.fields) if isinstance(out, relax.TupleType) else out)


def _rebuilt(func, replaced: dict[int, relax.Call]):
    """`func` with the calls at the given binding indices replaced."""
    blocks, i = [], 0
    for block in func.body.blocks:
        new = []
        for b in block.bindings:
            new.append(relax.VarBinding(b.var, replaced[i]) if i in replaced else b)
            i += 1
        kind = relax.DataflowBlock if isinstance(block, relax.DataflowBlock) else relax.BindingBlock
        blocks.append(kind(new, block.span))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body, func.body.span), func.ret_ty,
                          func.is_pure, func.attrs, func.span)
