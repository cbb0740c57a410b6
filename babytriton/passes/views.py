"""Views cost nothing: a view-like op (`unsqueeze`, `reshape`, `squeeze`, `permute_dims`, `broadcast_to`,
a slice) read by several consumers is repeated for each of them, so that every consumer's kernel
indexes through it instead of one copy kernel writing it out.

FuseOps fuses an injective op into its consumer only where that consumer is its one reader: rotary
embedding's `cos.unsqueeze(1)`, read by the q and the k products, was a kernel of its own, writing a
copy of cos. Each repeated view is one index computation in its consumer's loop, as Inductor inlines
views into every kernel that reads them. A view that is a result of the function keeps its binding.

The other ways a view stayed a kernel of its own:
- a gather (`take`, `x[idx]`) was opaque to FuseOps: AnnotatePatterns marks it injective, so its
  consumers index through it (and compute its index) in their own loops;
- a reshape between kernels (`x.reshape(n, g, -1)` of an input, `.view(x.shape)` of a kernel's
  result) was a copy kernel in the fusion map, and one at run time where it is a result:
  FreeReshapes makes each a view of the same memory (the VM's reshape);
- inside a fused kernel a view is a block writing a copy that the next block reads; InlineViews
  inlines it, so a reduction reads `x[i, k + 2]` itself (rowwise.py fuses views into reductions).
"""
from __future__ import annotations

import functools
import operator

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..schedules.unchecked import Schedule
from .blocks import BlockRewriter

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


def _read_only_in(fn: relax.Function, var, own) -> bool:
    """Whether no binding outside the block `own` reads `var` (the function's result may: the view's
    own binding stays for it)."""
    return not any(var in relax.analysis.free_vars(b.value) for block in fn.body.blocks
                   if not block.same_as(own) for b in block.bindings)


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


def _casts_of_inputs(fn: relax.Function) -> dict:
    """Var -> its value, for each cast (`x.float()`) of a parameter, or of a view or cast of one, and
    each view on such a chain: repeated for each reader, every kernel reads the input itself, as
    Inductor inlines a pointwise producer into each consumer. A kernel of its own would write the
    converted copy (twice the bytes of a half input) for every reader to read back."""
    found: dict = {}
    for block in fn.body.blocks:
        for b in block.bindings if isinstance(block, relax.DataflowBlock) else ():
            value = b.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                    value.op.name in ("relax.astype", *VIEW_OPS) and value.args and \
                    all(not isinstance(a.ty, relax.TensorType) or a in found or any(a.same_as(p) for p in fn.params)
                        for a in value.args):
                found[b.var] = value
    return {v: value for v, value in found.items() if _casts(v, found)}


def _casts(var, chains: dict) -> bool:
    """Whether a chain of views and casts holds a cast (a chain of views alone is `_view`'s)."""
    value = chains.get(var)
    return value is not None and (value.op.name == "relax.astype" or any(_casts(a, chains) for a in value.args))


_POINTWISE = (0, 1)   # AnnotateTIROpPattern's element-wise and broadcast kinds
_POINTWISE_SEEN: dict = {}


def _pointwise(call) -> bool:
    """Whether `call` is an element-wise Relax op over tensors (each result element reads its own
    position of every operand, broadcast ones included), by TVM's own analysis of the op legalized
    alone (AnnotateTIROpPattern); remembered by op, attributes and operand types."""
    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)) or call.op.name in VIEW_OPS or \
            not call.args or not all(isinstance(a.ty, relax.TensorType) for a in call.args):
        return False
    key = (call.op.name, str(call.attrs), tuple(str(a.ty) for a in call.args))
    if key not in _POINTWISE_SEEN:
        bb = relax.BlockBuilder()
        params = [relax.Var(f"a{i}", a.ty) for i, a in enumerate(call.args)]
        try:
            with bb.function("main", params):
                with bb.dataflow():
                    out = bb.emit_output(relax.Call(call.op, params, call.attrs, call.ty_args))
                bb.emit_func_output(out)
            mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(bb.get()))
            kernels = [f for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
            _POINTWISE_SEEN[key] = len(kernels) == 1 and int(kernels[0].attrs["op_pattern"]) in _POINTWISE
        except Exception:  # noqa: BLE001 - an op TVM cannot legalize alone (any kind of error): not element-wise
            _POINTWISE_SEEN[key] = False
    return _POINTWISE_SEEN[key]


def _cast_of(value):
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.astype"


def _reshape(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.reshape"


# views that keep the element order: a cast moved after one stays in the kernel reading the rows (a
# transpose keeps a narrowing cast before it, in the Tiled kernel that writes it, schedules/transpose.py;
# a widening one goes after it, `_widening`)
_REORDERLESS = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _permute(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.permute_dims"


def _widening(value) -> bool:
    """Whether `value` is a cast to a wider dtype (`x.float()` of a bfloat16 x): a transpose of an
    input moves the narrow elements (a transpose kernel of its own, rowwise._transposes_apart, then
    writes and the row kernel reads half the bytes) and the cast joins the transpose's consumer."""
    if not _cast_of(value):
        return False
    source, result = value.args[0].ty, value.attrs.dtype
    return isinstance(source, relax.TensorType) and tvm.DataType(result).bits > tvm.DataType(source.dtype).bits


def _reshape_like(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in _REORDERLESS


def _is_one(dim) -> bool:
    return isinstance(dim, tirx.IntImm) and dim.value == 1


def _same_shape(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


@relax.expr_functor.mutator
class _CastsPastViews(relax.PyExprMutator):
    """A cast and a view commute; each pair is put in the order that lets the cast fuse: after the
    views of an input (`x.float().reshape(n, g, -1)` -> `x.reshape(n, g, -1).float()`, a cast of the
    rows a row kernel reads, the view free), before a view of a computed value (`y.reshape(s).half()`
    -> `y.half().reshape(s)`, the cast in the kernel computing y, the view of its result free).
    FuseOps fuses no reshape into a reduction nor a producer through one: each was a copy kernel."""

    def __init__(self, mod, fn: relax.Function):
        super().__init__(mod)
        self.params = list(fn.params)
        self.values: dict = {}     # var -> its value, as written
        self.inputs: set = set()   # vars that are views and casts of a parameter
        self.dataflow = False
        self.readers = _readers(fn)

    def visit_dataflow_block_(self, block):
        # a rewrite reads its sources by name: only those of this block (one before an assert, say
        # a division's check, is a dataflow var of its own block, unknown here)
        self.values, self.inputs, self.dataflow = {}, set(), True
        try:
            return super().visit_dataflow_block_(block)
        finally:
            self.dataflow = False

    def _of_input(self, var) -> bool:
        return isinstance(var, relax.Var) and (var in self.inputs or any(var.same_as(p) for p in self.params))

    def _swapped(self, value):
        """The rewritten value of a cast-view pair, its first op emitted; None where none applies."""
        if _reshape_like(value) and _cast_of(self.values.get(value.args[0])) and \
                self._of_input(self.values[value.args[0]].args[0]):
            cast = self.values[value.args[0]]       # view(cast(input)) -> cast(view(input))
            view = relax.Call(value.op, [self.visit_expr(cast.args[0]), *value.args[1:]], value.attrs, value.ty_args)
            return relax.Call(cast.op, [self.builder_.emit(view, name_hint="view")], cast.attrs, cast.ty_args)
        if _permute(value) and _widening(self.values.get(value.args[0])) and \
                self._of_input(self.values[value.args[0]].args[0]):
            cast = self.values[value.args[0]]       # permute(widen(input)) -> widen(permute(input))
            view = relax.Call(value.op, [self.visit_expr(cast.args[0]), *value.args[1:]], value.attrs, value.ty_args)
            return relax.Call(cast.op, [self.builder_.emit(view, name_hint="view")], cast.attrs, cast.ty_args)
        if _cast_of(value) and _view(self.values.get(value.args[0])) and not self._of_input(value.args[0]):
            view = self.values[value.args[0]]       # cast(view(computed)) -> view(cast(computed))
            cast = relax.Call(value.op, [self.visit_expr(view.args[0])], value.attrs, value.ty_args)
            return relax.Call(view.op, [self.builder_.emit(cast, name_hint="cast"), *view.args[1:]], view.attrs,
                              view.ty_args)
        return self._reshaped_later(value)

    def _reshaped_later(self, value):
        """`f(y.reshape(s), w)` of a computed y and an element-wise f, the view read by f alone ->
        `f(y, w').reshape(s)`, w' being w broadcast to s and viewed in y's shape: f joins the kernel
        computing y (group norm's `g.reshape(n, c, h, w) * weight[:, None, None]`), reading w through
        its index. Not where w' would be a computed value broadcast: that copy would be written."""
        if not _pointwise(value):
            return None
        out = value.ty.shape if isinstance(value.ty, relax.TensorType) else None
        first = next((a for a in value.args if _reshape(self.values.get(a)) and not self._of_input(a)), None)
        if first is None or out is None or not _same_shape(first.ty.shape, out) or self.readers.get(first) != 1 \
                or not isinstance(first, relax.DataflowVar):
            return None  # (a view read elsewhere too: y is written out anyway, and f joins its reader there)
        source = self.visit_expr(self.values[first].args[0])
        if any(not a.same_as(first) and not self._of_input(a) and not isinstance(a, tvm.ir.Constant) and
               _copied_in(list(a.ty.shape), list(out), list(source.ty.shape)) for a in value.args):
            # a computed operand broadcast to y's shape is written out (FuseRowwise stores it from the
            # kernel computing it): a group norm's per-group mean, 18M elements for p54's (3351, 8, 688)
            return None
        args = [source if a.same_as(first) else self._in_shape_of(self.visit_expr(a), list(out),
                                                                  list(source.ty.shape)) for a in value.args]
        inside = self.builder_.emit(relax.Call(value.op, args, value.attrs, value.ty_args), name_hint="pointwise")
        return _reshaped(inside, list(out))

    def _in_shape_of(self, operand, out: list, inner: list):
        """`operand`, which broadcasts to `out`, viewed in `inner` (`_view_shapes`)."""
        if not operand.ty.shape:
            return operand
        shape, target, view = _view_shapes(list(operand.ty.shape), out, inner)
        if not _same_shape(shape, target):
            operand = self.builder_.emit(relax.op.broadcast_to(operand, relax.ShapeExpr(target)), name_hint="view")
        return self.builder_.emit(_reshaped(operand, view), name_hint="view")

    def visit_var_binding_(self, binding):
        value = binding.value
        self.values[binding.var] = value
        if (_view(value) or _cast_of(value)) and self._of_input(value.args[0]):
            self.inputs.add(binding.var)
        new = self._swapped(value) if self.dataflow else None
        if new is None:
            return super().visit_var_binding_(binding)
        emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
        self.set_var_remap(binding.var, emit(new, name_hint=binding.var.name))
        self.values[binding.var] = new   # its operands are new vars already (a chain of them goes on)


def _view_shapes(shape: list, out: list, inner: list) -> tuple:
    """(shape padded to out's rank, the shape it is broadcast to, that viewed in `inner`) for an operand
    of `shape` broadcasting to `out`, seen in `inner` (the same elements in another shape): axes that
    both shapes begin or end with stay as they are (size 1 where the operand broadcasts along them:
    its copy is no larger than it need be), the others are broadcast and reshaped."""
    shape = [tirx.IntImm("int64", 1)] * (len(out) - len(shape)) + shape
    lead = next((i for i, (a, b) in enumerate(zip(out, inner)) if not tvm_ffi.structural_equal(a, b)),
                min(len(out), len(inner)))
    trail = next((i for i, (a, b) in enumerate(zip(out[::-1], inner[::-1]))
                  if not tvm_ffi.structural_equal(a, b)), min(len(out), len(inner)) - lead)
    trail = min(trail, len(out) - lead, len(inner) - lead)
    kept = list(range(lead)) + list(range(len(out) - trail, len(out)))
    target = [shape[i] if i in kept and _is_one(shape[i]) else d for i, d in enumerate(out)]
    view = [target[i] for i in range(lead)] + inner[lead:len(inner) - trail] + \
        [target[len(out) - trail + j] for j in range(trail)]
    return shape, target, view


def _copied_in(shape: list, out: list, inner: list) -> bool:
    """Whether an operand of `shape` seen in `inner` is broadcast first (`_view_shapes`): a copy."""
    if not shape:
        return False
    padded, target, _ = _view_shapes(shape, out, inner)
    return not _same_shape(padded, target)


def casts_past_views(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with casts and views reordered so that casts fuse (_CastsPastViews)."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, fn in mod.functions.items():
        if isinstance(fn, relax.Function):
            out[gv] = _CastsPastViews(mod, fn).visit_expr(fn)
    return relax.transform.DeadCodeElimination()(out)


def repeat_views(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with each view read by several consumers repeated for each (see the module's docstring),
    and each cast of an input with it (`_casts_of_inputs`)."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, fn in mod.functions.items():
        if not isinstance(fn, relax.Function):
            continue
        counts = _readers(fn)
        # a view read past its block (its result, read after an assert) stays one binding: a repeat
        # there would read the block's own values, unknown past it ("Var is not defined": fuzz 41005834)
        shared = {b.var: b.value for block in fn.body.blocks if isinstance(block, relax.DataflowBlock)
                  for b in block.bindings if _view(b.value) and counts.get(b.var, 0) > 1
                  and _read_only_in(fn, b.var, block)}
        casts = _casts_of_inputs(fn)
        if any(counts.get(v, 0) > 1 for v in casts):
            shared.update(casts)
        if shared:
            out[gv] = _Repeat(mod, shared).visit_expr(fn)
    return relax.transform.DeadCodeElimination()(out)


# --------------------------------------------------------------------------------------------------
# an indexed read (a gather) is an injective op whose index is data
# --------------------------------------------------------------------------------------------------

INJECTIVE, OPAQUE = 2, 8   # AnnotateTIROpPattern's kinds


def _indexed_read(func: tirx.PrimFunc) -> bool:
    """Whether a PrimFunc is one spatial loop nest that writes its one result element by element at
    the loop's own index, reading at an index it loads (`take`, `gather_elements`, `x[idx]`). (Other
    opaque loop nests stay so: a slice or a concatenation of symbolic size, whose shapes FuseOps
    cannot carry into a fused function.)"""
    if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
        return False  # a user's kernel that binds its own threads
    loads = []
    tvm_ffi.structural_walk(func.body, (tvm.ir.expr.TensorLoad, loads.append))
    if not any(_loads(i) for load in loads for i in load.indices):
        return False
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    blocks = [b for b in blocks if b.iter_vars]   # not the root block
    if len(blocks) != 1 or blocks[0].init is not None or not isinstance(blocks[0].body, tirx.BufferStore):
        return False
    (block,) = blocks
    store, ivs = block.body, block.iter_vars
    out = func.params[-1] if func.params and tirx.is_buffer_var(func.params[-1]) else None
    return out is not None and store.buffer.same_as(out) and len(store.indices) == len(ivs) == len(out.ty.shape) \
        and all(iv.iter_type == tirx.IterVar.DataPar and isinstance(iv.dom.min, tirx.IntImm) and iv.dom.min.value == 0
                and i.same_as(iv.var) and tvm_ffi.structural_equal(iv.dom.extent, n)
                for i, iv, n in zip(store.indices, ivs, out.ty.shape))


def _loads(expr) -> bool:
    """Whether an expression loads from a buffer."""
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.expr.TensorLoad, found.append))
    return bool(found)


def annotate_patterns(mod: tvm.IRModule) -> tvm.IRModule:
    """AnnotateTIROpPattern, then each indexed read it found opaque is injective: FuseOps reads it
    from its consumers' loops (and computes its index there) as Inductor fuses a gather, instead of a
    kernel writing the gathered copy. A kernel that came with its own op_pattern keeps it."""
    given = {gv for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc) and f.attrs is not None
             and "op_pattern" in f.attrs}
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    gathers = [gv for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc) and gv not in given
               and int(f.attrs["op_pattern"]) == OPAQUE and _indexed_read(f)]
    if not gathers:
        return mod
    mod = mod.clone()
    for gv in gathers:
        mod[gv] = mod[gv].with_attr("op_pattern", INJECTIVE)
    return mod


AnnotatePatterns = tvm.transform.module_pass(lambda mod, _ctx: annotate_patterns(mod), opt_level=0,
                                             name="AnnotateTIROpPattern")


# --------------------------------------------------------------------------------------------------
# a reshape between kernels is a view: no kernel
# --------------------------------------------------------------------------------------------------

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


class _Reshapes(BlockRewriter):
    """Each kernel call that only reshapes (flatten, expand_dims, squeeze, a reshape: TVM's
    has_reshape_pattern) becomes Relax's reshape, which the VM runs as a new view of the same memory."""

    def block(self, block):
        bindings = [self.branches(b) for b in block.bindings]
        if isinstance(block, relax.DataflowBlock):
            kernels = {b.var for b in bindings if isinstance(b.value, relax.Call) and b.value.op.same_as(_CALL_TIR)}
            # a result of a kernel with several (a row kernel's side results) is its own buffer too
            kernels |= {b.var for b in bindings if isinstance(b.value, relax.TupleGetItem)
                        and b.value.tuple_value in kernels}
            readers: dict = {}
            for b in bindings:
                for var in relax.analysis.free_vars(b.value):
                    readers[var] = readers.get(var, 0) + 1
            bindings = [self._view(b, kernels, readers) for b in bindings]
        if all(new.same_as(old) for new, old in zip(bindings, block.bindings)):
            return block
        return type(block)(bindings, block.span)

    def _view(self, binding, kernels: set, readers: dict):
        """The binding as a view when it is a reshape kernel's call. A result of the function only
        views a value that a kernel computed for it alone: never an input (the caller's tensor would
        come back aliased), nor a value read elsewhere."""
        call = binding.value
        if not (isinstance(call, relax.Call) and call.op.same_as(_CALL_TIR) and len(call.args) == 2
                and isinstance(binding.var.ty, relax.TensorType) and isinstance(binding.var.ty.shape, relax.ShapeExpr)):
            return binding
        func = self.mod[call.args[0]]
        operands = list(call.args[1].fields)
        if not isinstance(func, tirx.PrimFunc) or len(operands) != 1 or not relax.analysis.has_reshape_pattern(func):
            return binding
        (source,) = operands
        if not _same_size(source, binding.var):  # `x[:1]` of a (2,): TVM's pattern reads a prefix as a reshape
            return binding
        if not isinstance(binding.var, relax.DataflowVar) and not (
                isinstance(source, relax.DataflowVar) and source in kernels and readers.get(source) == 1):
            return binding
        if isinstance(binding.var, relax.DataflowVar):
            view = relax.op.reshape(source, binding.var.ty.shape)
        else:  # TVM's build would make a result's reshape a kernel again (LegalizeOps): the VM's own op
            view = relax.call_pure_packed("vm.builtin.reshape", source, binding.var.ty.shape, ty_args=binding.var.ty)
        return relax.VarBinding(binding.var, self.builder.normalize(view), binding.span)


def _reshaped(x, shape: list):
    """relax.reshape of `x` to exactly `shape`: relax.op.reshape reads a size 0 as "the input's
    size there" (an empty (0, 1) viewed as (1, 0) became (1, 1), which TVM then refused)."""
    return relax.Call(tvm.ir.Op.get("relax.reshape"), [x, relax.ShapeExpr(shape)])


def _same_size(source, result) -> bool:
    """Whether two tensors provably hold as many elements (a reshape), by their static or symbolic sizes."""
    shapes = [getattr(v.ty, "shape", None) for v in (source, result)]
    if not all(isinstance(s, relax.ShapeExpr) for s in shapes):
        return False
    sizes = [functools.reduce(operator.mul, s.values, tirx.const(1, "int64")) for s in shapes]
    return bool(tvm.sym.Analyzer().can_prove_equal(sizes[0], sizes[1]))


def free_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """After FuseTIR: every reshape left as a kernel of its own becomes a view (see _Reshapes). TVM's
    build does this too (RewriteDataflowReshape), but after the schedules, and not for a result of
    the function; done here, the kernels listed are the kernels run."""
    rewriter = _Reshapes(mod)
    changed = False
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function) and not (func.attrs is not None and "Primitive" in func.attrs):
            new = rewriter.function(func)
            if not new.same_as(func):
                rewriter.builder.update_func(gvar, new)
                changed = True
    return relax.transform.DeadCodeElimination()(rewriter.builder.get()) if changed else mod


FreeReshapes = tvm.transform.module_pass(lambda mod, _ctx: free_reshapes(mod), opt_level=0, name="FreeReshapes")


# --------------------------------------------------------------------------------------------------
# inside a kernel, each consumer reads through the views it fused
# --------------------------------------------------------------------------------------------------

def _copies(block: s_tir.SBlock) -> bool:
    """Whether a block only copies an element from elsewhere: a transpose, a slice, a broadcast, a
    reshape, a gather (any index, no arithmetic on the value)."""
    return block.init is None and isinstance(block.body, tirx.BufferStore) \
        and isinstance(block.body.value, tvm.ir.expr.TensorLoad)


def inline_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A fused kernel with each view block inlined into the blocks that read it: the reduction of
    `x[:, 2:].sum(-1)` reads x at the sliced index itself, one block as Dlight's rules expect, instead
    of reading a copy that a block before it wrote."""
    blocks = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    views = [b.name_hint for b in blocks if b.iter_vars and _copies(b)]
    if not views or len(blocks) < 3:   # the root and one block: nothing reads the view inside
        return func
    try:
        sch = Schedule(func)
    except tvm.error.InternalError:  # a fused function that binds a size in a later stage: left whole
        return func
    for name in views:
        block = sch.get(sch.get_sblock(name))
        if any(_read_reversed(b, block.writes[0].source) for b in blocks if not b.same_as(block)):
            continue
        try:
            sch.compute_inline(sch.get_sblock(name))
        except s_tir.ScheduleError:   # it writes a result of the kernel: kept
            continue
    return sch.mod["main"]


def _read_reversed(block: s_tir.SBlock, buffer) -> bool:
    """Whether `block` reads `buffer` at an index that decreases along one of its iterators (a flip).
    Such a view stays a block: inlined, the view's `% size` and `// width` wrap the reversed index,
    which Dlight's normalisation (TVM's iter-map rewriting) turns wrong (`(11 - v) % 4` became
    `-(v % -4)`: `flip(x.reshape(-1))`, and with it the gradients of prod and cumsum)."""
    loads = []
    tvm_ffi.structural_walk(block.body, (tvm.ir.expr.TensorLoad, loads.append))
    ivars = [iv.var for iv in block.iter_vars]
    for load in loads:
        if not load.source.same_as(buffer):
            continue
        for index in load.indices:
            coefficients = tvm.sym.detect_linear_equation(index, ivars)
            if any(isinstance(c, tirx.IntImm) and c.value < 0 for c in list(coefficients)[:-1]):
                return True
    return False


def inline_fused_views(mod: tvm.IRModule) -> tvm.IRModule:
    """inline_views on every kernel not scheduled yet."""
    out = mod
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and not (func.attrs is not None and "tirx.is_scheduled" in func.attrs):
            new = inline_views(func)
            if not new.same_as(func):
                out = out.clone() if out is mod else out
                out[gvar] = new
    return out


InlineViews = tvm.transform.module_pass(lambda mod, _ctx: inline_fused_views(mod), opt_level=0, name="InlineViews")
