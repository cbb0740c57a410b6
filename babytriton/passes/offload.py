"""What the pipeline hands to torch instead of generating a kernel: matrix products (cuBLAS on a GPU;
bfloat16 ones on a CPU, see targets.offloaded_matmuls), and on either target attention blocks `softmax(q @ kᵀ * scale) @ v` (torch's fused
scaled-dot-product attention); on a GPU, sorts (torch's stable sort).

TVM's PyPI build has no cuBLAS and no fused attention, while torch ships both and a Relax packed call
reaches them: each rewrite replaces Relax ops by `call_dps_packed` into a function registered here,
before legalization, so the fusion map shows the ops it absorbed. Inductor does the same with
attention (it pattern-matches the composition into `scaled_dot_product_attention`).
"""
from __future__ import annotations

import functools
import math

import torch
import tvm
import tvm_ffi
from tvm import relax

from ..operators import scans
from ..core.dlpack import vm_to_torch
from ..core.targets import MatmulOffload

TORCH_MATMUL = "babytriton.torch_matmul"
TORCH_ATTENTION = "babytriton.torch_attention"
FLOATS = ("float16", "bfloat16", "float32")

# what `k.fusion` says schedules an offloaded kernel, by the name prefix of its packed function
TORCH_ARGSORT = "babytriton.torch_argsort"
TORCH_SORT = "babytriton.torch_sort"
TORCH_SCANS = {"relax.cumsum": "babytriton.torch_cumsum", "relax.cumprod": "babytriton.torch_cumprod"}
RULES = {TORCH_ATTENTION: ("SDPA", "torch scaled_dot_product_attention"),
         TORCH_MATMUL: ("torch.matmul", "cuBLAS or the CPU BLAS, through torch"),
         TORCH_ARGSORT: ("torch.argsort", "torch's stable sort (CUB's segmented radix sort)"),
         TORCH_SORT: ("torch.sort", "torch's stable sort (CUB's segmented radix sort)"),
         TORCH_SCANS["relax.cumsum"]: ("torch.cumsum", "torch's parallel scan (CUB)"),
         TORCH_SCANS["relax.cumprod"]: ("torch.cumprod", "torch's parallel scan (CUB)")}


def rule_of(name: str) -> tuple[str, str] | None:
    """The (rule, launch) of an offloaded kernel, None for a kernel babytriton generates."""
    for prefix, rule in RULES.items():
        if name.startswith(prefix):
            return rule
    return None


# --------------------------------------------------------------------------------------------------
# the packed functions
# --------------------------------------------------------------------------------------------------

# Each is a torch-level function `f(*inputs, out=None)`: the VM calls it through `_packed` (its
# tensors read as torch tensors, the result written into the VM's `out`), and a compiled function that
# is nothing but one of these calls runs it directly, torch allocating the result (`direct_call`).

def _matmul(ta: bool, tb: bool):
    """a @ b, either operand arriving untransposed: torch (cuBLAS) reads the transposed view directly."""
    def matmul(a, b, out=None):
        return torch.matmul(a.mT if ta else a, b.mT if tb else b, out=out)
    return matmul


def _matmul_bias(ta: bool, tb: bool):
    """a @ b + bias in one call (cuBLAS's bias epilogue) for a 2-d b and a 1-d bias: the rows of a,
    batch axes and all, are one matrix."""
    def addmm(a, b, bias, out=None):
        a, b = a.mT if ta else a, b.mT if tb else b
        rows = a.reshape(-1, a.shape[-1])
        if out is None:
            return torch.addmm(bias, rows, b).view(*a.shape[:-1], b.shape[-1])
        torch.addmm(bias, rows, b, out=out.view(-1, out.shape[-1]))
        return out
    return addmm


def _attention(k_transposed: bool):
    """softmax(q @ kᵀ * scale) @ v; k arrives as (..., S, E), or as kᵀ (..., E, S) for the "_kt" variant.
    SDPA has no `out=`, so the VM's call copies the result into its output buffer (one extra write);
    a direct call makes it contiguous, as every compiled result is (flash attention's is not)."""
    def attention(q, k, v, scale, out=None):
        result = torch.nn.functional.scaled_dot_product_attention(q, k.mT if k_transposed else k, v,
                                                                  scale=float(scale))
        return result.contiguous() if out is None else out.copy_(result)
    return attention


def _name(prefix: str, ta: bool, tb: bool) -> str:
    """The packed function's name; its suffix says which operands arrive transposed ("nt": a @ b.mT)."""
    return f"{prefix}_{'t' if ta else 'n'}{'t' if tb else 'n'}"


TORCH_MATMUL_T = {(ta, tb): _name(TORCH_MATMUL, ta, tb) for ta in (False, True) for tb in (False, True) if ta or tb}
TORCH_MATMUL_BIAS = {(ta, tb): _name(TORCH_MATMUL + "_bias", ta, tb) for ta in (False, True) for tb in (False, True)}
TORCH_ATTENTION_KT = TORCH_ATTENTION + "_kt"

# packed function name -> (the torch-level function, how many of its leading inputs are tensors)
TORCH_FUNCTIONS = {TORCH_MATMUL: (_matmul(False, False), 2),
                   **{name: (_matmul(ta, tb), 2) for (ta, tb), name in TORCH_MATMUL_T.items()},
                   **{name: (_matmul_bias(ta, tb), 3) for (ta, tb), name in TORCH_MATMUL_BIAS.items()},
                   TORCH_ATTENTION: (_attention(False), 3), TORCH_ATTENTION_KT: (_attention(True), 3)}


def _packed(function, tensors: int):
    """The VM's packed function for a torch-level one: VM tensors in, the result written into `out`."""
    def packed(*args):
        function(*map(vm_to_torch, args[:tensors]), *args[tensors:-1], out=vm_to_torch(args[-1]))
    return packed


for _packed_name, (_function, _tensors) in TORCH_FUNCTIONS.items():
    tvm.register_global_func(_packed_name, _packed(_function, _tensors), override=True)


def _argsort(x, axis, descending, out):
    """torch's stable argsort of x along `axis`, written into `out` in its index dtype."""
    out.copy_(torch.argsort(x, dim=int(axis), descending=bool(descending), stable=True))


def _sort(x, axis, descending, out):
    """torch's stable sort of x along `axis`, written into `out`."""
    out.copy_(torch.sort(x, dim=int(axis), descending=bool(descending), stable=True).values)


def _scan(step):
    """torch's scan `step` (cumsum, cumprod) of x along `axis` (-1: of x flattened) into `out`, in
    out's dtype; `exclusive`: each element the scan of those before it (the identity first)."""
    def scan(x, axis, exclusive, out):
        axis = int(axis)
        if axis < 0:
            x, axis = x.reshape(-1), 0
        n = x.shape[axis]
        if n == 0:
            return
        if not exclusive:
            out.copy_(step(x, dim=axis, dtype=out.dtype))
            return
        out.narrow(axis, 0, 1).fill_(0 if step is torch.cumsum else 1)
        if n > 1:
            out.narrow(axis, 1, n - 1).copy_(step(x.narrow(axis, 0, n - 1), dim=axis, dtype=out.dtype))
    return scan


# not TORCH_FUNCTIONS: a direct call would give torch's int64 indices where the function says int32
tvm.register_global_func(TORCH_ARGSORT, _packed(_argsort, 1), override=True)
tvm.register_global_func(TORCH_SORT, _packed(_sort, 1), override=True)
tvm.register_global_func(TORCH_SCANS["relax.cumsum"], _packed(_scan(torch.cumsum), 1), override=True)
tvm.register_global_func(TORCH_SCANS["relax.cumprod"], _packed(_scan(torch.cumprod), 1), override=True)


def direct_call(func: relax.Function):
    """(torch-level function, its inputs) where the Relax function is nothing but one call of a
    TORCH_FUNCTIONS function on its own parameters and constants, returned as it is: each input is
    ("param", index of the parameter) or ("value", a Python number). None for anything else."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return None
    bindings = [binding for block in body.blocks for binding in block.bindings]
    if len(bindings) != 1 or not bindings[0].var.same_as(body.body):
        return None
    call = bindings[0].value
    if not (_is_op(call, "relax.call_dps_packed") and isinstance(call.args[0], relax.ExternFunc)):
        return None
    entry = TORCH_FUNCTIONS.get(str(call.args[0].global_symbol))
    if entry is None:
        return None
    params = list(func.params)
    inputs = []
    for arg in call.args[1].fields:
        position = next((i for i, p in enumerate(params) if p.same_as(arg)), None)
        if position is not None:
            inputs.append(("param", position))
        elif isinstance(arg, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):   # a constant (relax.prim_value)
            inputs.append(("value", arg.value))
        else:
            return None
    return entry[0], inputs


# --------------------------------------------------------------------------------------------------
# the rewrites
# --------------------------------------------------------------------------------------------------

def _is_op(value, name: str) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == name


def _swaps_last_two(value) -> bool:
    """Whether `value` is permute_dims swapping the last two axes and keeping the others."""
    if not _is_op(value, "relax.permute_dims"):
        return False
    n = value.ty.ndim
    axes = value.attrs.axes
    axes = list(range(n))[::-1] if axes is None else [int(x) for x in axes]
    return n >= 2 and axes == list(range(n - 2)) + [n - 1, n - 2]


def _scalar(expr) -> float | None:
    """The value of a one-element constant, None for anything else."""
    if isinstance(expr, tvm.ir.Constant) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(()))
    return None


def _float_matmul(call) -> bool:
    a, b = call.args
    dtype = str(a.ty.dtype)
    return (dtype in FLOATS and str(b.ty.dtype) == dtype and a.ty.ndim >= 2 and b.ty.ndim >= 2
            and call.attrs.out_dtype in (None, "", dtype))


def _multiply_adds(call) -> int | None:
    """The multiply-adds of a product of static sizes (batch x rows x inner x columns), else None."""
    shapes = [value.ty.shape for value in (*call.args, call)]
    if any(shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values) for shape in shapes):
        return None
    out, inner = shapes[2].values, shapes[0].values[-1]
    return math.prod(int(d) for d in out) * int(inner)


def _widened_matmul(call, half: str) -> bool:
    """A product of two `half` operands computed in float32."""
    a, b = call.args
    return (half in ("float16", "bfloat16") and str(a.ty.dtype) == half and str(b.ty.dtype) == half
            and a.ty.ndim >= 2 and b.ty.ndim >= 2 and call.attrs.out_dtype == "float32")


class _Offload(relax.PyExprMutator):
    """Shared by the rewrites: what a var is bound to, and how many bindings read it."""

    def __init__(self, mod, func):
        super().__init__(mod)
        self.readers: dict = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                for var in relax.analysis.free_vars(binding.value):
                    self.readers[var] = self.readers.get(var, 0) + 1
        for var in relax.analysis.free_vars(func.body.body):
            self.readers[var] = self.readers.get(var, 0) + 1

    def bound(self, expr, readers: int | None = 1):
        """The value a dataflow var is bound to, if that many bindings read it (any number for None)."""
        if not isinstance(expr, relax.Var) or (readers is not None and self.readers.get(expr, 0) != readers):
            return None
        try:
            return self.lookup_binding(expr)
        except Exception:  # a parameter, or a var of another function
            return None

    def untransposed(self, operand):
        """(x, True) for an operand that is permute_dims(x) swapping its last two axes, else
        (operand, False): torch reads the transposed view, so the transpose needs no kernel of its own."""
        value = self.bound(operand, readers=None)
        return (value.args[0], True) if _swaps_last_two(value) else (operand, False)


@relax.expr_functor.mutator
class _MatmulToTorch(_Offload):
    """Float matrix products, and a product plus a bias vector (`x @ w + b`, the product read only by
    the add) as one call with cuBLAS's bias epilogue, which adds in float32 before rounding once."""

    def __init__(self, mod, func, offload: MatmulOffload = MatmulOffload(FLOATS)):
        super().__init__(mod, func)
        self.offload = offload

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if _is_op(call, "relax.matmul") and _float_matmul(call) and \
                self.offload.takes(str(call.args[0].ty.dtype), _multiply_adds(call)):
            (a, ta), (b, tb) = (self.untransposed(x) for x in call.args)
            name = TORCH_MATMUL_T.get((ta, tb), TORCH_MATMUL)
            return relax.op.call_dps_packed(relax.ExternFunc(name), [a, b], call.ty)
        if _is_op(call, "relax.add"):
            for product, bias in (call.args, call.args[::-1]):
                fused = self.with_bias(product, bias, call)
                if fused is not None:
                    return fused
        return call

    def with_bias(self, product, bias, add):
        value = self.bound(product)
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                and value.op.name == "relax.call_dps_packed" and value.args[0].global_symbol in self.plain):
            return None
        ta, tb = self.plain[value.args[0].global_symbol]
        a, b = value.args[1].fields
        rows = a.ty.ndim == 2 or not ta  # transposed batched rows are no one matrix
        same = tvm_ffi.structural_equal
        if not (rows and b.ty.ndim == 2 and isinstance(bias.ty, relax.TensorType) and bias.ty.ndim == 1
                and str(bias.ty.dtype) == str(product.ty.dtype) and same(add.ty, product.ty)
                and bias.ty.shape is not None and same(bias.ty.shape.values[0], product.ty.shape.values[-1])):
            return None
        return relax.op.call_dps_packed(relax.ExternFunc(TORCH_MATMUL_BIAS[(ta, tb)]), [a, b, bias], add.ty)

    plain = {TORCH_MATMUL: (False, False), **{name: key for key, name in TORCH_MATMUL_T.items()}}


@relax.expr_functor.mutator
class _AttentionToTorch(_Offload):
    """`P @ v` where P is a softmax over the last axis of `q @ kᵀ` (times or divided by a constant),
    every intermediate read once: one SDPA call. The intermediates are then unused and removed."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        outer = self.product(call)
        if outer is None:
            return call
        probs, v = outer.args
        scores, readers = self.softmax_input(self.bound(probs))
        scale, product = self.scaled(self.bound(scores, readers))
        if product is None:
            return call
        q, keys = product.args
        k, k_is_transposed = self.untransposed(keys)
        if not self.same_batch(q, k, v, k_is_transposed):
            return call
        name = TORCH_ATTENTION if k_is_transposed else TORCH_ATTENTION_KT
        args = [q, k, v, relax.prim_value(tvm.tirx.FloatImm("float64", scale))]
        return relax.op.call_dps_packed(relax.ExternFunc(name), args, call.ty)

    def product(self, value):
        """The matmul call of a float product: `a @ b` itself, or, on a CPU, a half product computed in
        float32 and rounded once (`astype(matmul(a, b, out_dtype="float32"), half)`, see RelaxCodeGen)."""
        if _is_op(value, "relax.matmul") and _float_matmul(value):
            return value
        if _is_op(value, "relax.astype"):
            inner = self.bound(value.args[0])
            if _is_op(inner, "relax.matmul") and _widened_matmul(inner, str(value.ty.dtype)):
                return inner
        return None

    def softmax_input(self, value):
        """(S, how many of its ops read S) for a softmax of S over its last axis: the library op (1),
        or exp(S - max S) / sum(...) (2); (None, 0) for anything else."""
        if _is_op(value, "relax.nn.softmax"):
            x = value.args[0]
            return (x, 1) if int(value.attrs.axis) in (-1, x.ty.ndim - 1) else (None, 0)
        if not _is_op(value, "relax.divide"):
            return None, 0
        e, total = value.args
        total = self.bound(total)
        if not (_is_op(total, "relax.sum") and total.args[0].same_as(e) and self.last_axis(total)
                and self.readers.get(e, 0) == 2):
            return None, 0
        exp = self.lookup_binding(e) if isinstance(e, relax.Var) else None
        shifted = self.bound(exp.args[0]) if _is_op(exp, "relax.exp") else None
        if not _is_op(shifted, "relax.subtract"):
            return None, 0
        s, peak = shifted.args
        peak = self.uncast(self.bound(peak))
        if not (_is_op(peak, "relax.max") and self.last_axis(peak) and self.readers.get(s, 0) == 2):
            return None, 0
        maxed = peak.args[0]
        if not maxed.same_as(s):  # bfloat16: the maximum is taken in float32 (see codegen)
            cast = self.bound(maxed)
            if not (_is_op(cast, "relax.astype") and cast.args[0].same_as(s)):
                return None, 0
        return s, 2

    def uncast(self, value):
        """The value an astype (read once) converts, else `value` itself."""
        if _is_op(value, "relax.astype"):
            return self.bound(value.args[0])
        return value

    @staticmethod
    def last_axis(reduction) -> bool:
        axes = reduction.attrs.axis
        n = reduction.args[0].ty.ndim
        return bool(reduction.attrs.keepdims) and axes is not None and [int(a) % n for a in axes] == [n - 1]

    def scaled(self, value):
        """(scale, the `q @ kᵀ` call) for scores bound to the product times or divided by constants,
        in any order (`p * c`, `c * p`, `c * p / d`, ...), or to the product itself; (None, None) else."""
        scale = 1.0
        while self.product(value) is None:
            if _is_op(value, "relax.astype") and str(value.ty.dtype).startswith(("float", "bfloat")):
                # a half product scaled in float32 (`astype(astype(p, "float32") * c, half)`: a half
                # tensor times a number computes so, as in torch) is scaled as SDPA scales it
                value = self.bound(value.args[0])
                continue
            if not (_is_op(value, "relax.multiply") or _is_op(value, "relax.divide")):
                return None, None
            divide = _is_op(value, "relax.divide")
            pairs = [value.args] if divide else [value.args, value.args[::-1]]
            for operand, constant in pairs:
                c = _scalar(constant)
                if c is not None and c != 0 and math.isfinite(c):
                    scale *= 1.0 / c if divide else c
                    value = self.bound(operand)
                    break
            else:
                return None, None
        return scale, self.product(value)

    @staticmethod
    def same_batch(q, k, v, k_is_transposed) -> bool:
        """q (..., L, E), k (..., S, E), v (..., S, Ev) with the same leading axes, as SDPA wants."""
        shapes = [x.ty.shape for x in (q, k, v)]
        if any(s is None or not isinstance(s, relax.ShapeExpr) for s in shapes) or len({len(s.values) for s in shapes}) != 1:
            return False
        (qs, ks, vs) = [list(s.values) for s in shapes]
        if len(qs) < 3:
            return False
        if not k_is_transposed:
            ks = ks[:-2] + [ks[-1], ks[-2]]
        same = tvm_ffi.structural_equal
        return (all(same(a, b) and same(a, c) for a, b, c in zip(qs[:-2], ks[:-2], vs[:-2]))
                and same(qs[-1], ks[-1]) and same(ks[-2], vs[-2]))


def _sorted(name: str, x, axis: int, descending: bool, ty) -> relax.Call:
    """A packed call of torch's sort or argsort of x along `axis`, giving `ty`."""
    args = [x, relax.prim_value(tvm.tirx.IntImm("int64", axis)), relax.prim_value(tvm.tirx.IntImm("int64", descending))]
    return relax.op.call_dps_packed(relax.ExternFunc(name), args, ty)


@relax.expr_functor.mutator
class _SortsToTorch(_Offload):
    """sort, argsort and topk on a GPU as torch's stable sort (a topk is the first k of an argsort and
    the values gathered at them): TVM's GPU sort (odd-even sorts of 128-element blocks, then merges by
    one thread per run) is slow on long rows. cumsum and cumprod as our scan kernels (scans.py), or
    where those decline as torch's scans; not TVM's GPU scan,
    which tvm.compile dispatches them to, gave wrong scans over middle and outer axes on an H200
    (the performance fuzzer's p12 and p89)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        rounded = scans.rounded_once(self.builder_, call, self.bound)   # a half scan's result written by it
        if rounded is not None:
            return rounded
        for op, name in TORCH_SCANS.items():
            if _is_op(call, op) and call.args[0].ty.shape is not None:
                ours = scans.rewrite(self.builder_, call, self.bound)   # our templates; torch's where they decline
                if ours is not None:
                    return ours
                axis = -1 if call.attrs.axis is None else int(call.attrs.axis) % call.args[0].ty.ndim
                args = [call.args[0], relax.prim_value(tvm.tirx.IntImm("int64", axis)),
                        relax.prim_value(tvm.tirx.IntImm("int64", bool(call.attrs.exclusive)))]
                return relax.op.call_dps_packed(relax.ExternFunc(name), args, call.ty)
        if not any(_is_op(call, f"relax.{op}") for op in ("argsort", "sort", "topk")):
            return call
        x, attrs = call.args[0], call.attrs
        shape = x.ty.shape
        if shape is None:
            return call  # a tensor of unknown rank keeps TVM's sort
        axis = int(attrs.axis) % x.ty.ndim
        if not _is_op(call, "relax.topk"):
            name = TORCH_ARGSORT if _is_op(call, "relax.argsort") else TORCH_SORT
            return _sorted(name, x, axis, bool(attrs.descending), call.ty)
        order_ty = relax.TensorType(shape, str(attrs.dtype), x.ty.vdevice)
        order = self.builder_.emit(_sorted(TORCH_ARGSORT, x, axis, bool(attrs.largest), order_ty))
        k = shape.values[axis] if int(attrs.k) < 1 else int(attrs.k)   # TVM's topk: k < 1 takes all
        first = self.builder_.emit(relax.op.strided_slice(order, [axis], [0], [k], assume_inbound=True))
        if attrs.ret_type == "indices":
            return first
        values = self.builder_.emit(relax.op.gather_elements(x, first, axis))
        return values if attrs.ret_type == "values" else relax.Tuple([values, first])


def _rewrite(mod: tvm.IRModule, mutator_class) -> tvm.IRModule:
    mod = mod.clone()  # passes must not change the module a previous stage recorded
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            mutator = mutator_class(mod, func)
            mod[gv] = relax.analysis.remove_all_unused(mutator.visit_expr(func))
            for added, kernel in mutator.builder_.get().functions_items():  # kernels a rewrite added (scans)
                if added.name_hint not in [g.name_hint for g in mod.get_global_vars()]:
                    mod[added] = kernel
    return mod


def offload_attention(mod: tvm.IRModule) -> tvm.IRModule:
    """Replace attention blocks by a packed call into torch's scaled_dot_product_attention."""
    return _rewrite(mod, _AttentionToTorch)


def offload_matmul(mod: tvm.IRModule, offload: MatmulOffload = MatmulOffload(FLOATS)) -> tvm.IRModule:
    """Replace the matrix products `offload` takes by a packed call into torch.matmul (cuBLAS, or the
    CPU BLAS), before legalization."""
    return _rewrite(mod, functools.partial(_MatmulToTorch, offload=offload))


def offload_sorts(mod: tvm.IRModule) -> tvm.IRModule:
    """Replace every sort, argsort and topk by packed calls into torch's stable sort, and every cumsum
    and cumprod by torch's scan (for a GPU)."""
    return _rewrite(mod, _SortsToTorch)
