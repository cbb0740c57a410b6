"""Reductions and scans as torch spells them: `dim`, `keepdim`, (values, indices) pairs.

The Relax spelling of the same tensor methods keeps Relax's meaning: `x.max(axis=1, keepdims=True)` is
the values only, as the library's max, while `x.max(1)` / `x.max(dim=1)` is torch's (values, indices).
"""
from __future__ import annotations

import collections
import math

import torch
import torch.nn.functional as F

from ...core.errors import Diagnostic
from ...core.types import dtype_name, is_float_dtype
from .pointwise import as_float, in_float32
from .registry import dim as one_dim
from .registry import dims, op, tensor, torch_rule

# torch's (values, indices) results, as namedtuples so that `.values` / `.indices` read them.
PAIRS = {name: collections.namedtuple(name, ["values", "indices"]) for name in ("max", "min", "topk", "sort")}


def _relax_spelling(axis, keepdims) -> bool:
    return axis is not None or keepdims is not None


def _axes(b, x, dim, axis, where: str):
    """The axes a reduction runs over: torch's `dim` or the Relax spelling's `axis` (None: all)."""
    return dims(b, x, axis if axis is not None else dim, where)


def _with_dtype(b, x, dtype):
    return x if dtype is None else b.as_tensor(x, _dtype_name(dtype))


def _accumulated(b, name: str, x, dtype, *args):
    """sum/prod/cumsum/cumprod in `dtype` when given (the library accumulates integers in int64, which
    narrowed back wraps as an int32 accumulator does), else as the library does."""
    result = op(b, name, _with_dtype(b, x, dtype), *args)
    return _with_dtype(b, result, dtype)


def _dtype_name(dtype) -> str:
    try:
        return dtype_name(dtype)
    except ValueError as e:
        raise Diagnostic(str(e)) from None


def _count(b, x, axes):
    """How many elements a reduction over `axes` meets: a Python int for static sizes; a tensor
    (a sum of ones, in x's dtype) where a size is symbolic."""
    shape = b.shape(x)
    sizes = [shape[a] for a in (range(len(shape)) if axes is None else axes)]
    if all(isinstance(s, int) for s in sizes):
        return math.prod(sizes)
    return op(b, "sum", op(b, "ones_like", x), axes, True)


# ----------------------------------------------------------------------------------------------
# sum, mean, prod, nansum, amax, amin
# ----------------------------------------------------------------------------------------------
@torch_rule(torch.sum, torch.Tensor.sum, methods=("sum",))
def sum_(b, input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch.sum; the Relax spelling (`axis=`, `keepdims=`) means the same here."""
    x = tensor(b, input, "torch.sum()")
    axes = _axes(b, x, dim, axis, "torch.sum()")
    return _accumulated(b, "sum", x, dtype, axes, keepdim if keepdims is None else keepdims)


@torch_rule(torch.mean, torch.Tensor.mean, methods=("mean",))
def mean(b, input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch.mean: of float tensors only (or with a float `dtype=`), as torch."""
    x = _with_dtype(b, tensor(b, input, "torch.mean()"), dtype)
    if not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"torch.mean(): could not infer output dtype: the input must be a float tensor, got "
                         f"{b.describe(x)} (torch refuses it too); pass dtype=torch.float32 or convert it")
    return op(b, "mean", x, _axes(b, x, dim, axis, "torch.mean()"), keepdim if keepdims is None else keepdims)


@torch_rule(torch.prod, torch.Tensor.prod, methods=("prod",))
def prod(b, input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """torch.prod (integers and bools multiply in int64, as torch)."""
    x = tensor(b, input, "torch.prod()")
    axes = _axes(b, x, dim, axis, "torch.prod()")
    return _accumulated(b, "prod", x, dtype, axes, keepdim if keepdims is None else keepdims)


@torch_rule(torch.nansum, torch.Tensor.nansum, methods=("nansum",))
def nansum(b, input, dim=None, keepdim=False, *, dtype=None):
    """torch.nansum: the sum with NaN read as 0."""
    x = tensor(b, input, "torch.nansum()")
    if is_float_dtype(b.dtype(x)):
        x = op(b, "where", op(b, "isnan", x), b.as_tensor(0, b.dtype(x)), x)
    return sum_(b, x, dim, keepdim, dtype=dtype)


def _extreme(name: str):
    def rule(b, input, dim=(), keepdim=False):
        x = tensor(b, input, f"torch.a{name}()")
        return op(b, name, x, dims(b, x, dim, f"torch.a{name}()") or None, keepdim)
    rule.__name__ = f"a{name}"
    rule.__doc__ = f"torch.a{name}: the {name} over `dim` (all axes by default; NaN propagates)."
    return rule


torch_rule(torch.amax, torch.Tensor.amax, methods=("amax",))(_extreme("max"))
torch_rule(torch.amin, torch.Tensor.amin, methods=("amin",))(_extreme("min"))


# ----------------------------------------------------------------------------------------------
# max, min (values and indices), argmax, argmin
# ----------------------------------------------------------------------------------------------
def _max_min(name: str):
    def rule(b, input, dim=None, keepdim=False, *, other=None, axis=None, keepdims=None):
        x = tensor(b, input, f"torch.{name}()")
        where = f"torch.{name}()"
        other = dim if b.is_tensor(dim) else other
        if other is not None:  # torch.max(a, b): the element-wise maximum
            return op(b, "maximum" if name == "max" else "minimum", x, tensor(b, other, where))
        if _relax_spelling(axis, keepdims):  # x.max(axis=1, keepdims=True): Relax's values only
            return op(b, name, x, axis if axis is not None else dim, bool(keepdims))
        if dim is None:
            return op(b, name, x)
        d = one_dim(b, x, dim, where)
        values = op(b, name, x, [d], keepdim)
        return PAIRS[name](values, _arg(b, "arg" + name, x, d, keepdim))
    rule.__name__ = name
    rule.__doc__ = (f"torch.{name}: of the whole tensor; with `dim`, (values, indices); of two tensors, "
                    f"element-wise. The Relax spelling (`axis=`, `keepdims=`) gives the values only.")
    return rule


def _arg(b, name: str, x, d, keepdim: bool):
    """argmax/argmin as torch gives them: int64 indices, the first NaN's where a NaN is."""
    return b.as_tensor(op(b, name, x, d, keepdim), "int64")


torch_rule(torch.max, torch.Tensor.max, methods=("max",))(_max_min("max"))
torch_rule(torch.min, torch.Tensor.min, methods=("min",))(_max_min("min"))


def _argextreme(name: str):
    def rule(b, input, dim=None, keepdim=False, *, axis=None, keepdims=None):
        x = tensor(b, input, f"torch.{name}()")
        d = axis if axis is not None else dim
        d = None if d is None else one_dim(b, x, d, f"torch.{name}()")
        keep = keepdim if keepdims is None else keepdims
        if d is None and keep:  # the flat index, in a tensor of x's rank (torch's shape)
            return op(b, "reshape", _arg(b, name, x, None, False), [1] * b.ndim(x))
        return _arg(b, name, x, d, keep)
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}: int64 indices (of the flattened tensor when dim is None)."
    return rule


torch_rule(torch.argmax, torch.Tensor.argmax, methods=("argmax",))(_argextreme("argmax"))
torch_rule(torch.argmin, torch.Tensor.argmin, methods=("argmin",))(_argextreme("argmin"))


# ----------------------------------------------------------------------------------------------
# all, any, count_nonzero
# ----------------------------------------------------------------------------------------------
def _nonzero_count(b, x, axes, keepdim: bool):
    """How many elements along `axes` are nonzero (NaN counts), in int64; 0 for an empty axis."""
    return op(b, "sum", b.as_tensor(x, "bool"), axes, keepdim)


def _all_any(name: str):
    def rule(b, input, dim=None, keepdim=False):
        x = tensor(b, input, f"torch.{name}()")
        axes = dims(b, x, dim, f"torch.{name}()")
        if name == "any":
            result = op(b, "greater", _nonzero_count(b, x, axes, keepdim), 0)
        else:
            result = op(b, "equal", _nonzero_count(b, op(b, "logical_not", x), axes, keepdim), 0)
        return b.as_tensor(result, "uint8") if b.dtype(x) == "uint8" else result  # torch's uint8 exception
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}: a bool tensor (uint8 for uint8 input, as torch), from a count of nonzeros."
    return rule


torch_rule(torch.all, torch.Tensor.all, methods=("all",))(_all_any("all"))
torch_rule(torch.any, torch.Tensor.any, methods=("any",))(_all_any("any"))


@torch_rule(torch.count_nonzero, torch.Tensor.count_nonzero, methods=("count_nonzero",))
def count_nonzero(b, input, dim=None):
    """torch.count_nonzero: int64 counts over `dim` (an int, a tuple, or all)."""
    x = tensor(b, input, "torch.count_nonzero()")
    return _nonzero_count(b, x, dims(b, x, dim, "torch.count_nonzero()"), False)


# ----------------------------------------------------------------------------------------------
# var, std, logsumexp, norms
# ----------------------------------------------------------------------------------------------
def _correction(dim, unbiased, correction, where: str):
    """(dim, correction) from torch's spellings: `correction=`, `unbiased=` or a bool in dim's place."""
    if isinstance(dim, bool):  # torch.var(x, False): the legacy `unbiased` position
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise Diagnostic(f"{where}: pass either unbiased= or correction=, not both")
    if correction is None:
        correction = 0 if unbiased is False else 1
    return dim, correction


def _variance(b, x, axes, correction, keepdim: bool, where: str):
    """sum((x - mean)^2) / max(n - correction, 0), from differentiable library ops (torch's two passes)."""
    if not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"{where}: std and var only support floating point dtypes, got {b.describe(x)} "
                         "(torch refuses them too)")
    def compute(v):
        centered = op(b, "subtract", v, op(b, "mean", v, axes, True))
        squares = op(b, "sum", op(b, "multiply", centered, centered), axes, keepdim)
        n = _count(b, v, axes)
        if not b.is_tensor(n):  # no degrees of freedom left: 0/0 is NaN, s/0 inf, as torch divides
            return op(b, "divide", squares, float(n - correction)) if n > correction else \
                op(b, "multiply", squares, math.inf)
        n = n if keepdim else op(b, "squeeze", n, axes) if axes is not None else op(b, "reshape", n, [])
        return op(b, "divide", squares, op(b, "maximum", op(b, "subtract", n, correction), 0.0))
    return in_float32(b, x, compute)


@torch_rule(torch.var, torch.Tensor.var, methods=("var",))
def var(b, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var: unbiased (correction=1) unless told otherwise."""
    x = tensor(b, input, "torch.var()")
    dim, correction = _correction(dim, unbiased, correction, "torch.var()")
    return _variance(b, x, dims(b, x, dim, "torch.var()") or None, correction, keepdim, "torch.var()")


@torch_rule(torch.std, torch.Tensor.std, methods=("std",))
def std(b, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std: the square root of torch.var."""
    return op(b, "sqrt", var(b, input, dim, unbiased, keepdim, correction=correction))


@torch_rule(torch.var_mean)
def var_mean(b, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.var_mean: (var, mean)."""
    x = tensor(b, input, "torch.var_mean()")
    mean_dim = _correction(dim, unbiased, correction, "torch.var_mean()")[0]
    # torch's one-pass (Welford) mean is NaN wherever an inf meets it: sum(x - x) is NaN exactly there
    poison = sum_(b, op(b, "subtract", x, x), mean_dim, keepdim)
    return var(b, x, dim, unbiased, keepdim, correction=correction), op(b, "add", mean(b, x, mean_dim, keepdim), poison)


@torch_rule(torch.std_mean)
def std_mean(b, input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """torch.std_mean: (std, mean)."""
    v, m = var_mean(b, input, dim, unbiased, keepdim, correction=correction)
    return op(b, "sqrt", v), m


@torch_rule(torch.logsumexp, torch.Tensor.logsumexp, torch.special.logsumexp, methods=("logsumexp",))
def logsumexp(b, input, dim=(), keepdim=False):
    """torch.logsumexp: max + log(sum(exp(x - max))), the max taken as 0 where it is ±inf (a row of
    -inf gives -inf, a +inf gives inf); over an empty axis, -inf."""
    x = as_float(b, tensor(b, input, "torch.logsumexp()"))
    axes = dims(b, x, dim, "torch.logsumexp()") or None
    shape = b.shape(x)
    if any(isinstance(shape[a], int) and shape[a] == 0 for a in (range(len(shape)) if axes is None else axes)):
        return op(b, "log", op(b, "sum", op(b, "exp", x), axes, keepdim))  # log(0) = -inf, as torch

    def compute(v):
        m = op(b, "max", v, axes, True)
        m = op(b, "where", op(b, "isinf", m), b.as_tensor(0, b.dtype(v)), m)
        total = op(b, "log", op(b, "sum", op(b, "exp", op(b, "subtract", v, m)), axes, keepdim))
        shift = m if keepdim else op(b, "squeeze", m, axes) if axes is not None else op(b, "reshape", m, [])
        return op(b, "add", total, shift)
    return in_float32(b, x, compute)


def _vector_norm(b, x, ord, axes, keepdim: bool, where: str):
    """The `ord`-norm of x over `axes` (2, 1, inf, -inf, 0 or any other number), in float32 for halves."""
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise Diagnostic(f"{where}: ord/p must be a number (or 'fro'), got {ord!r}; matrix norms such as "
                         "'nuc' are not supported in @jit code")
    if not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"{where}: expected a float tensor, got {b.describe(x)} (torch refuses it too)")
    def compute(v):
        a = op(b, "abs", v)
        if ord == math.inf or ord == -math.inf:
            return op(b, "max" if ord > 0 else "min", a, axes, keepdim)
        if ord == 0:
            return b.as_tensor(_nonzero_count(b, v, axes, keepdim), b.dtype(v))
        if ord == 1:
            return op(b, "sum", a, axes, keepdim)
        if ord == 2:
            return op(b, "sqrt", op(b, "sum", op(b, "multiply", v, v), axes, keepdim))
        return op(b, "power", op(b, "sum", op(b, "power", a, float(ord)), axes, keepdim), 1.0 / ord)
    return in_float32(b, x, compute)


@torch_rule(torch.linalg.vector_norm)
def vector_norm(b, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.vector_norm."""
    v = _with_dtype(b, tensor(b, x, "torch.linalg.vector_norm()"), dtype)
    return _vector_norm(b, v, ord, dims(b, v, dim, "torch.linalg.vector_norm()") or None, keepdim,
                        "torch.linalg.vector_norm()")


@torch_rule(torch.norm, torch.Tensor.norm, methods=("norm",))
def norm(b, input, p="fro", dim=None, keepdim=False, dtype=None):
    """torch.norm / x.norm: vector norms ('fro' and None are 2) over `dim` (all axes by default)."""
    x = _with_dtype(b, tensor(b, input, "torch.norm()"), dtype)
    p = 2 if p in ("fro", None) else p
    return _vector_norm(b, x, p, dims(b, x, dim, "torch.norm()") or None, keepdim, "torch.norm()")


# ----------------------------------------------------------------------------------------------
# softmax, log_softmax, scans, sorts
# ----------------------------------------------------------------------------------------------
def _softmax(name: str, negate: bool = False):
    def rule(b, input, dim=None, _stacklevel=3, dtype=None):
        where = f"torch.{name}()"
        x = _with_dtype(b, tensor(b, input, where), dtype)
        if dim is None:
            raise Diagnostic(f"{where}: pass dim explicitly (torch's implicit choice of dim is deprecated and "
                             "not supported in @jit code)")
        if not is_float_dtype(b.dtype(x)):
            raise Diagnostic(f"{where} takes a float tensor, got {b.describe(x)}; pass dtype=torch.float32")
        x = op(b, "negative", x) if negate else x
        return op(b, "log_softmax" if name == "log_softmax" else "softmax", x, one_dim(b, x, dim, where))
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}(input, dim, dtype=): the library's NaN-correct {name}."
    return rule


torch_rule(torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax, methods=("softmax",))(
    _softmax("softmax"))
torch_rule(torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, torch.special.log_softmax,
           methods=("log_softmax",))(_softmax("log_softmax"))
torch_rule(F.softmin, name="torch.nn.functional.softmin")(_softmax("softmin", negate=True))


def _scan(name: str):
    def rule(b, input, dim, *, dtype=None):
        x = tensor(b, input, f"torch.{name}()")
        return _accumulated(b, name, x, dtype, one_dim(b, x, dim, f"torch.{name}()"))
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}(input, dim, dtype=) (integers and bools accumulate in int64, as torch)."
    return rule


torch_rule(torch.cumsum, torch.Tensor.cumsum, methods=("cumsum",))(_scan("cumsum"))
torch_rule(torch.cumprod, torch.Tensor.cumprod, methods=("cumprod",))(_scan("cumprod"))


# dtypes TVM's CPU sort kernels refuse at run time ("Unsupported input dtype"), sorted in one that holds
# every value exactly. bfloat16: the library's VIA_FLOAT32 would, but argsort/topk's index `dtype=`
# makes library.half_result skip it, and TVM has no bfloat16 isnan.
SORTED_AS = {"bool": "int32", "int8": "int32", "uint8": "int32", "int16": "int32", "bfloat16": "float32"}


def _sort_key(b, x):
    """x as TVM's sorts can take it, in the same order."""
    return b.as_tensor(x, SORTED_AS[b.dtype(x)]) if b.dtype(x) in SORTED_AS else x


@torch_rule(torch.topk, torch.Tensor.topk, methods=("topk",))
def topk(b, input, k, dim=-1, largest=True, sorted=True):
    """torch.topk: (values, indices int64), sorted (also for sorted=False, whose order torch leaves open)."""
    x = tensor(b, input, "torch.topk()")
    d = one_dim(b, x, dim, "torch.topk()")
    size = b.shape(x)[d] if b.ndim(x) else 1
    if isinstance(size, int) and not 0 <= k <= size:
        raise Diagnostic(f"torch.topk(): selected index k={k} is out of range for a dimension of size {size}")
    values, indices = op(b, "topk", _sort_key(b, x), k, d, "both", largest, "int64")
    return PAIRS["topk"](b.as_tensor(values, b.dtype(x)), indices)


@torch_rule(torch.argsort, torch.Tensor.argsort, methods=("argsort",))
def argsort(b, input, dim=-1, descending=False, *, stable=False):
    """torch.argsort: int64 indices of a stable sort (NaN largest, as torch)."""
    x = tensor(b, input, "torch.argsort()")
    return op(b, "argsort", _sort_key(b, x), one_dim(b, x, dim, "torch.argsort()"), descending, "int64")


@torch_rule(torch.sort, torch.Tensor.sort, methods=("sort",))
def sort(b, input, dim=-1, descending=False, *, stable=False):
    """torch.sort: (values, indices int64) of a stable sort."""
    x = tensor(b, input, "torch.sort()")
    d = one_dim(b, x, dim, "torch.sort()")
    indices = op(b, "argsort", _sort_key(b, x), d, descending, "int64")
    return PAIRS["sort"](op(b, "gather_elements", x, indices, d), indices)
