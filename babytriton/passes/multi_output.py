"""FuseMultiOutput: element-wise kernels over one shape that feed each other become one kernel with
several outputs (an optimizer step's p, m and v; `y = x * 2; return y, y + 1`).

FuseOps never fuses a value into its consumer when the value is also a result of the function or is
read by another kernel (the value's post-dominator is then outside the consumer), so AdamW's m and v
are each written by a kernel of their own and read back by the kernel that computes p. This pass runs
after FuseOps and merges such kernels: a producer kernel joins a consumer kernel when both are
element-wise (or broadcast) over the same shape and the consumer reads the producer's result element
for element (at its own index, checked in the TIR); kernels over one shape that read a common value
and not each other (`x.exp(), x.sin()`) join too, as Inductor fuses consumers sharing an input, so the
value is read once. Reductions over the same axes of one shape, the innermost kept (`x.mean(1),
x.amax(1)`, batch-norm's sum and sum of squares, max and argmax over an outer axis), that read a common
value and not each other join alike, each with its FuseOps producers and epilogue (a mean's division):
OuterReduction and CPUOuterReduction run their reduction blocks in one loop nest, reading the common
input once. The merged Primitive function returns a tuple of
the values still needed outside it; FuseTIR makes it one PrimFunc writing each of them, which the
schedules run as one loop nest. No op is computed twice (each kernel joins one group), and every op
keeps its arithmetic, so results do not change.
"""
from __future__ import annotations

import heapq

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from .blocks import BlockRewriter
from .rowwise import PREFIX as ROWS_PREFIX
from .rowwise import _BROADCAST, _CALL_TIR, Rows, _classify, _Graph, _outputs, _same, _shape, with_free_sizes

PREFIX = "fused_"


class _Kernel:
    """A kernel binding that may join others: the shape it writes, on which device; for a reduction
    over outer axes, the rows it reduces (in the caller's symbolic sizes)."""

    def __init__(self, shape: tuple | None, vdevice, rows: Rows | None = None):
        self.shape, self.vdevice, self.rows = shape, vdevice, rows


def _primitive(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs


def _kernel(mod: tvm.IRModule, binding) -> _Kernel | None:
    """The binding as a kernel of element-wise and broadcast ops writing one tensor, or None."""
    call, ty = binding.value, binding.var.ty
    if not isinstance(call, relax.Call) or not isinstance(ty, relax.TensorType) or _shape(binding.var) is None:
        return None
    if call.op.same_as(_CALL_TIR):
        calls = [call]
    elif isinstance(call.op, tvm.ir.GlobalVar) and _primitive(mod[call.op]) \
            and not call.op.name_hint.startswith(ROWS_PREFIX):  # row kernels keep their row schedules
        body = mod[call.op].body
        calls = [b.value for block in body.blocks for b in block.bindings]
        if not isinstance(body.body, relax.Var):
            return None
    else:
        return None
    for c in calls:
        if not (isinstance(c, relax.Call) and c.op.same_as(_CALL_TIR)) or len(c.args) > 2:
            return None  # not a kernel call, or one passing symbolic sizes (defined where it is now)
        func = mod[c.args[0]]
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None or "op_pattern" not in func.attrs \
                or int(func.attrs["op_pattern"]) > _BROADCAST:
            return None
    return _Kernel(_shape(binding.var), ty.vdevice)


def _same_place(a: _Kernel, b: _Kernel) -> bool:
    """Element-wise kernels over one shape on one device (reductions never join their readers)."""
    return a.rows is None and b.rows is None and _same(a.shape, b.shape) and _same_device(a, b)


def _same_device(a: _Kernel, b: _Kernel) -> bool:
    return (a.vdevice is None and b.vdevice is None) or (
        a.vdevice is not None and b.vdevice is not None and tvm_ffi.structural_equal(a.vdevice, b.vdevice))


def _siblings(a: _Kernel, b: _Kernel) -> bool:
    """Kernels that may share one loop nest when they read a common value: element-wise ones over one
    shape, or reductions over the same rows (one iteration space, the same axes reduced)."""
    if a.rows is not None or b.rows is not None:
        return a.rows is not None and a.rows == b.rows and _same_device(a, b)
    return _same_place(a, b)


# --------------------------------------------------------------------------------------------------
# reductions over outer or middle axes
# --------------------------------------------------------------------------------------------------

def _reduction(mod: tvm.IRModule, binding) -> _Kernel | None:
    """The binding as a kernel of one reduction that keeps the innermost axis, with element-wise ops
    before or after it (a FuseOps group, a row group, an argmax's (index, value) pair), or None."""
    call = binding.value
    if not isinstance(call, relax.Call):
        return None
    if call.op.same_as(_CALL_TIR):
        func, inner = None, [binding]
    elif isinstance(call.op, tvm.ir.GlobalVar) and _primitive(mod[call.op]):
        func = mod[call.op]
        inner = [b for block in func.body.blocks for b in block.bindings]
    else:
        return None
    ops = [_classify(mod, b) for b in inner]
    if any(op is None for op in ops) or any(op.kind not in ("reduce", "ewise") for op in ops):
        return None
    reductions = [op for op in ops if op.kind == "reduce"]
    if len(reductions) != 1 or any(op.kind == "ewise" and op.pattern > _BROADCAST for op in ops) \
            or (func is not None and any(len(b.value.args) > 2 for b in inner if isinstance(b.value, relax.Call))):
        return None  # (a call passing symbolic sizes defines them where it is now)
    rows = reductions[0].rows
    if rows.whole or len(rows.shape) - 1 in rows.axes:  # the innermost axis reduced: a row kernel's
        return None
    if func is not None:
        rows = Rows(_outside(rows.shape, func, call.args), rows.axes)
    ty = binding.var.ty
    first = ty.fields[0] if isinstance(ty, relax.TupleType) and ty.fields else ty
    return _Kernel(None, getattr(first, "vdevice", None), rows)


def _outside(shape: tuple, func: relax.Function, args) -> tuple:
    """A shape inside a Primitive function in the caller's symbolic sizes (FuseOps names its own)."""
    sizes = {}
    for p, a in zip(func.params, args):
        inside, out = _shape(p), _shape(a)
        if inside is not None and out is not None and len(inside) == len(out):
            sizes.update((d, e) for d, e in zip(inside, out) if isinstance(d, tirx.Var))
    return tuple(tvm_ffi.structural_map(d, [(tvm.ir.Var, lambda v: sizes.get(v, v))]) for d in shape) \
        if sizes else shape


def _reads_in_place(mod: tvm.IRModule, binding, var) -> bool:
    """Whether every op of the kernel `binding` that reads `var` reads element i at its own element i,
    writing the kernel's shape: only then may one loop compute both, each element before its use."""
    call = binding.value
    if call.op.same_as(_CALL_TIR):
        uses = [(call, i, var) for i, a in enumerate(call.args[1].fields) if a.same_as(var)]
    else:  # a FuseOps group (its shapes name its own symbolic variables: compared with its parameter's)
        func = mod[call.op]
        params = [p for p, a in zip(func.params, call.args) if a.same_as(var)]
        uses = [(b.value, i, a) for block in func.body.blocks for b in block.bindings
                for i, a in enumerate(b.value.args[1].fields) if a in params]
        if isinstance(func.body.body, relax.Var) and func.body.body in params:
            return False  # the kernel returns its input: nothing to compute in place
    return bool(uses) and all(_same(_shape(c), _shape(a)) and _in_place(mod[c.args[0]], i) for c, i, a in uses)


def _in_place(func: tirx.PrimFunc, index: int) -> bool:
    """Whether the PrimFunc is one spatial block over the shape of its `index`-th parameter that loads
    that parameter only at the block's own indices."""
    if index >= len(func.params) or not tirx.is_buffer_var(func.params[index]):
        return False
    buffer = func.params[index]
    shape = tuple(buffer.ty.shape)
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    blocks = [b for b in blocks if b.iter_vars]
    if len(blocks) != 1 or blocks[0].init is not None:
        return False
    (block,) = blocks
    ivs = block.iter_vars
    if len(ivs) != len(shape) or not all(iv.iter_type == tirx.IterVar.DataPar and _zero(iv.dom.min) for iv in ivs) \
            or not _same(tuple(iv.dom.extent for iv in ivs), shape):
        return False
    loads = []
    tvm_ffi.structural_walk(block.body, (tvm.ir.expr.TensorLoad, loads.append))
    loads = [ld for ld in loads if ld.source.same_as(buffer)]
    return bool(loads) and all(len(ld.indices) == len(ivs) and all(
        i.same_as(iv.var) for i, iv in zip(ld.indices, ivs)) for ld in loads)


def _zero(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == 0


# --------------------------------------------------------------------------------------------------
# grouping the kernels of one dataflow block
# --------------------------------------------------------------------------------------------------

def partition(mod: tvm.IRModule, bindings: list) -> list[list]:
    """The groups of two or more kernel bindings to merge, each a list of vars in binding order."""
    graph = _Graph(bindings)
    kernels = {b.var: k for b in bindings if (k := _kernel(mod, b) or _reduction(mod, b)) is not None}
    by_var = {b.var: b for b in bindings}
    group_of: dict = {}
    for b in bindings:
        if b.var not in kernels:
            continue
        mine = [b.var]
        group_of[b.var] = mine
        merging = True
        while merging:  # again after a merge: a group left apart may join what `mine` has become
            merging = False
            for producer in graph.producers[b.var]:
                group = group_of.get(producer)
                if group is None or group is mine or not _same_place(kernels[producer], kernels[b.var]):
                    continue
                # every value one side reads from the other, read in place (not only b's reads: a
                # kernel merged into `mine` before may read this group too)
                edges = [(c, p) for c in group for p in graph.producers[c] if p in mine]
                edges += [(c, p) for c in mine for p in graph.producers[c] if p in group]
                if not all(_reads_in_place(mod, by_var[c], p) for c, p in edges) \
                        or not graph.convex(group + mine, lambda v: group_of.get(v, (v,))):
                    continue
                merged = sorted(group + mine, key=graph.order.get)
                for v in merged:
                    group_of[v] = merged
                mine, merging = merged, True
    _join_siblings(bindings, kernels, group_of, graph)
    return [g for g in _unique_lists(group_of.values()) if len(g) > 1]


def _join_siblings(bindings: list, kernels: dict, group_of: dict, graph: _Graph) -> None:
    """Merge the groups of kernels over one shape, or of reductions over the same rows, that read a
    common value and not each other (`x.exp(), x.sin()`; `x.mean(1), x.amax(1)`): one loop nest reads
    it once for all, as Inductor fuses consumers sharing an input."""
    readers: dict = {}
    for b in bindings:
        if b.var in kernels:
            for v in dict.fromkeys(_args(b.value)):
                readers.setdefault(v, []).append(b.var)
    for users in readers.values():
        for i, other in enumerate(users):
            for user in users[:i]:  # any earlier reader of its kind (an element-wise one may come first)
                first, group = group_of[user], group_of[other]
                if group is first or not _siblings(kernels[user], kernels[other]) \
                        or any(p in first for c in group for p in graph.producers[c]) \
                        or any(p in group for c in first for p in graph.producers[c]) \
                        or not graph.convex(first + group, lambda v: group_of.get(v, (v,))):
                    continue
                merged = sorted(first + group, key=graph.order.get)
                for v in merged:
                    group_of[v] = merged


def _args(call) -> list:
    """The vars a kernel call reads (a FuseOps group's arguments, a call_tir's operands)."""
    args = call.args[1].fields if call.op.same_as(_CALL_TIR) else call.args
    return [a for a in args if isinstance(a, relax.Var)]


def _unique_lists(lists) -> list:
    return list({id(g): g for g in lists}.values())


# --------------------------------------------------------------------------------------------------
# rewriting: one Primitive function per group
# --------------------------------------------------------------------------------------------------

def _group_function(mod: tvm.IRModule, bindings_of: dict, members: list, outputs: list):
    """The group as a Primitive Relax function returning `outputs`, the arguments of its call, and
    the op names its kernel is named after."""
    inside = set(members)
    params, args, remap, body, names, inlined = [], [], {}, [], [], []

    def param(a):
        if a in inside:
            return remap[a]
        for x, p in zip(args, params):
            if a.same_as(x):
                return p
        args.append(a)
        params.append(relax.Var(a.name if isinstance(a, relax.Var) else f"c{len(args)}", a.ty))
        return params[-1]

    for v in members:
        call = bindings_of[v].value
        if call.op.same_as(_CALL_TIR):
            operands = relax.Tuple([param(a) for a in call.args[1].fields])
            new = relax.Call(call.op, [call.args[0], operands, *call.args[2:]], call.attrs, call.ty_args,
                             call.span)
            remap[v] = relax.Var(v.name, v.ty)
            body.append(relax.VarBinding(remap[v], new))
            names.append(call.args[0].name_hint)
            continue
        # a FuseOps group: its bindings, its parameters bound to what the call passes (a group
        # called again, as a backward's twin gradient terms are, is a fresh copy: a var is bound once)
        func = mod[call.op]
        if any(call.op.same_as(op) for op in inlined):
            func = relax.utils.copy_with_new_vars(func)
        inlined.append(call.op)
        func = func.bind_params({p: param(a) for p, a in zip(func.params, call.args)})
        for block in func.body.blocks:
            body.extend(block.bindings)
            names.extend(b.value.args[0].name_hint for b in block.bindings  # (not a pair's items)
                         if isinstance(b.value, relax.Call) and b.value.op.same_as(_CALL_TIR))
        remap[v] = func.body.body
    if len(outputs) == 1:
        result, ty = remap[outputs[0]], outputs[0].ty
    else:  # an argmax's (index, value) pair as its two items: FuseTIR writes flat tuples
        items = []
        for v in outputs:
            if isinstance(v.ty, relax.TupleType):
                for i, field in enumerate(v.ty.fields):
                    items.append(relax.Var(f"{v.name}_{i}", field))
                    body.append(relax.VarBinding(items[-1], relax.TupleGetItem(remap[v], i)))
            else:
                items.append(remap[v])
        result, ty = relax.Tuple(items), relax.TupleType([v.ty for v in items])
    func = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(body)], result), ty, True)
    return func.with_attr("Primitive", 1), args, names


def _in_order(bindings: list, unit_of: dict) -> list:
    """Bindings of units (a group's is its call and the reads of its outputs, `unit_of` maps each var
    to its unit's key) in an order that defines every var before its use, close to the given one."""
    graph = _Graph(bindings)
    units: dict = {}
    for b in bindings:
        units.setdefault(unit_of.get(b.var, b.var), []).append(b)
    waits = {u: {unit_of.get(p, p) for b in bs for p in graph.producers[b.var]} - {u} for u, bs in units.items()}
    first = {u: graph.order[bs[0].var] for u, bs in units.items()}
    ready = [(first[u], i, u) for i, u in enumerate(units) if not waits[u]]
    heapq.heapify(ready)
    index = {u: i for i, u in enumerate(units)}
    out = []
    while ready:
        _, _, unit = heapq.heappop(ready)
        out.extend(units[unit])
        for u, w in waits.items():
            if unit in w:
                w.discard(unit)
                if not w:
                    heapq.heappush(ready, (first[u], index[u], u))
    assert len(out) == len(bindings), "a merged group depends on itself"
    return out


class _Rewriter(BlockRewriter):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.inlined: set = set()  # the FuseOps functions now inside a merged one

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        groups = partition(self.mod, bindings) if isinstance(block, relax.DataflowBlock) else []
        if not groups and all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        graph = _Graph(bindings)
        bindings_of = {b.var: b for b in bindings}
        replaced, unit_of = {}, {}
        for members in groups:
            outputs = _outputs(members, graph)
            func, args, names = _group_function(self.mod, bindings_of, members, outputs)
            func, args = with_free_sizes(func, args)
            gvar = self.builder.add_func(func, PREFIX + "_".join(names))
            self.inlined.update(bindings_of[v].value.op for v in members
                                if isinstance(bindings_of[v].value.op, tvm.ir.GlobalVar))
            if len(outputs) == 1:  # the others only feed it (FuseOps leaves such a chain in an If branch)
                results = outputs[0]
                group = [relax.VarBinding(results, relax.Call(gvar, args))]
            else:
                results = relax.DataflowVar("_".join(v.name for v in outputs), func.ret_ty)
                group = [relax.VarBinding(results, relax.Call(gvar, args))]
                group += _items(results, outputs)
            replaced[members[-1]] = group
            for v in members:
                unit_of[v] = members[-1]
                replaced.setdefault(v, [])
            unit_of[results] = members[-1]
        new = [b for old in bindings for b in replaced.get(old.var, [old])]
        return type(block)(_in_order(new, unit_of), block.span)


def _items(results, outputs: list) -> list:
    """The bindings of each output to its item of the group's flat tuple of results (a pair output,
    an argmax's (index, value), rebuilt from its two items)."""
    bindings, i = [], 0
    for v in outputs:
        if isinstance(v.ty, relax.TupleType):
            n = len(v.ty.fields)
            bindings.append(relax.VarBinding(v, relax.Tuple([relax.TupleGetItem(results, i + j) for j in range(n)])))
            i += n
        else:
            bindings.append(relax.VarBinding(v, relax.TupleGetItem(results, i)))
            i += 1
    return bindings


def fuse_multi_output(mod: tvm.IRModule) -> tvm.IRModule:
    """Merge element-wise kernels over one shape that read each other's results (see the module docstring)."""
    rewriter = _Rewriter(mod)
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function) and not _primitive(func):
            new = rewriter.function(func)
            if not new.same_as(func):  # normalised: the rebuilt Ifs and calls get their types
                rewriter.builder.update_func(gvar, rewriter.builder.normalize(new))
    out = rewriter.builder.get()
    called = set()
    for _, func in out.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: called.add(e) if isinstance(e, tvm.ir.GlobalVar) else None)
    unused = [g for g in rewriter.inlined if g not in called]  # FuseOps functions now inside a merged one
    if not unused:
        return out
    out = out.clone()  # the builder's module may be the recorded FuseOps stage's
    for gvar in unused:
        del out[gvar]
    return out


FuseMultiOutput = tvm.transform.module_pass(lambda mod, _ctx: fuse_multi_output(mod), opt_level=0,
                                            name="FuseMultiOutput")
