"""Linear algebra as torch spells it: matmul and its fixed-rank forms (mm, bmm, mv, dot), outer products,
the fused `add*` forms (beta * input + alpha * product), cdist, diff, matrix norms, trace, kron.

Every product is the library's `matmul`, which compiles as `@` does (float16/bfloat16 products accumulate
in float32, as torch's) and has a compiled gradient; the rest are element-wise ops and reductions.
"""
from __future__ import annotations

import math

import torch
import tvm

from ...core.errors import Diagnostic
from ...core.types import format_shape, is_float_dtype
from ..values import broadcast, is_symbolic
from .pointwise import HALVES
from .reductions import _vector_norm, _with_dtype, vector_norm
from .registry import dim as one_dim
from .registry import dims, op, tensor, torch_rule
from .shapes import cat, diagonal, equal, require, sliced


# ----------------------------------------------------------------------------------------------
# products
# ----------------------------------------------------------------------------------------------
def _operands(b, x, y, where: str):
    """Two tensors of one dtype, as torch's products take them (no promotion; no bools)."""
    x, y = tensor(b, x, where), tensor(b, y, where)
    if b.dtype(x) != b.dtype(y):
        raise Diagnostic(f"{where}: expected both operands to have the same dtype, but got {b.dtype(x)} and "
                         f"{b.dtype(y)} (torch refuses it too); convert one with .to()")
    if b.dtype(x) == "bool":
        raise Diagnostic(f"{where}: products of bool tensors are not supported (torch refuses them too)")
    return x, y


def _check_ranks(b, x, y, ranks: tuple, where: str) -> None:
    """torch's fixed-rank products (mm: (2, 2), bmm: (3, 3), mv: (2, 1), dot: (1, 1))."""
    if (b.ndim(x), b.ndim(y)) != ranks:
        raise Diagnostic(f"{where}: expected {ranks[0]}-d and {ranks[1]}-d tensors, got {b.describe(x)} and "
                         f"{b.describe(y)}")


def _product(b, x, y, where: str):
    """torch.matmul(x, y) with its 1-d rules (a vector is a row on the left, a column on the right, its
    dim removed after), batch dims broadcast; sizes checked in torch's words."""
    if b.ndim(x) == 0 or b.ndim(y) == 0:
        raise Diagnostic(f"{where}: both arguments to matmul need to be at least 1D, but they are "
                         f"{b.ndim(x)}D and {b.ndim(y)}D")
    xs, ys = tuple(b.shape(x)), tuple(b.shape(y))
    inner = ys[-2] if len(ys) > 1 else ys[0]
    require(b, equal(xs[-1], inner), f"{where}: shapes {format_shape(xs)} and {format_shape(ys)} cannot be "
                                     f"multiplied (inner sizes {xs[-1]} and {inner} differ)")
    if broadcast(xs[:-2], ys[:-2]) is None:
        raise Diagnostic(f"{where}: the batch dims of {format_shape(xs)} and {format_shape(ys)} do not broadcast")
    return op(b, "matmul", x, y)


@torch_rule(torch.matmul, torch.Tensor.matmul, torch.linalg.matmul, methods=("matmul",))
def matmul(b, input, other):
    """torch.matmul: `@` (any ranks >= 1, batch dims broadcast)."""
    return _product(b, *_operands(b, input, other, "torch.matmul()"), "torch.matmul()")


def _fixed_rank(name: str, ranks: tuple):
    def rule(b, input, other):
        where = f"torch.{name}()"
        x, y = _operands(b, input, other, where)
        _check_ranks(b, x, y, ranks, where)
        if name == "bmm":
            batches = b.shape(x)[0], b.shape(y)[0]
            require(b, equal(*batches), f"{where}: batch1 and batch2 must have the same number of batches, "
                                        f"got {batches[0]} and {batches[1]}")
        return _product(b, x, y, where)
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}: matmul of a {ranks[0]}-d and a {ranks[1]}-d tensor (no broadcasting)."
    return rule


for _name, _ranks in {"mm": (2, 2), "bmm": (3, 3), "mv": (2, 1), "dot": (1, 1), "vdot": (1, 1)}.items():
    torch_rule(getattr(torch, _name), getattr(torch.Tensor, _name), methods=(_name,))(_fixed_rank(_name, _ranks))


@torch_rule(torch.inner, torch.Tensor.inner, methods=("inner",))
def inner(b, input, other):
    """torch.inner: the sum over the last dims; a number times a tensor where one is 0-d."""
    x, y = tensor(b, input, "torch.inner()"), tensor(b, other, "torch.inner()")
    if b.ndim(x) == 0 or b.ndim(y) == 0:
        return op(b, "multiply", x, y)
    x, y = _operands(b, x, y, "torch.inner()")
    ys = list(b.shape(y))
    flat = op(b, "reshape", y, [-1, ys[-1]]) if len(ys) != 2 else y
    product = _product(b, x, op(b, "permute_dims", flat, [1, 0]), "torch.inner()")
    return op(b, "reshape", product, [*b.shape(x)[:-1], *ys[:-1]]) if len(ys) != 2 else product


@torch_rule(torch.outer, torch.ger, torch.Tensor.outer, torch.Tensor.ger, methods=("outer", "ger"))
def outer(b, input, vec2):
    """torch.outer: input[i] * vec2[j] (dtypes promoted, as torch's multiply)."""
    x, y = tensor(b, input, "torch.outer()"), tensor(b, vec2, "torch.outer()")
    if b.ndim(x) != 1 or b.ndim(y) != 1:
        raise Diagnostic(f"torch.outer(): expected two 1-d tensors, got {b.describe(x)} and {b.describe(y)}")
    return op(b, "multiply", op(b, "expand_dims", x, 1), y)


# ----------------------------------------------------------------------------------------------
# beta * input + alpha * product
# ----------------------------------------------------------------------------------------------
def _add_scaled(b, input, product, beta, alpha, where: str):
    """beta * input + alpha * product(…), computed in float32 for halves and rounded once (torch's
    fused kernels); beta = 0 ignores input (NaN there does not propagate), as torch."""
    x = tensor(b, input, where)
    for name, value in (("beta", beta), ("alpha", alpha)):
        if b.is_tensor(value) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Diagnostic(f"{where}: {name} must be a number, got {b.describe(value)}")
    dtype = b.dtype(x)
    if not is_float_dtype(dtype) and any(isinstance(v, float) for v in (beta, alpha)):
        raise Diagnostic(f"{where}: for integral input tensors, beta and alpha must not be floats "
                         "(torch refuses it too)")
    wide = "float32" if dtype in HALVES else dtype
    result = product(lambda v: b.as_tensor(v, wide))
    if b.dtype(result) != wide:
        raise Diagnostic(f"{where}: expected the operands to have input's dtype {dtype}, got {b.dtype(result)}")
    result = result if alpha == 1 else op(b, "multiply", result, alpha)
    if beta != 0:
        scaled = b.as_tensor(x, wide)
        result = op(b, "add", scaled if beta == 1 else op(b, "multiply", scaled, beta), result)
    shape = tuple(b.shape(result))
    if broadcast(tuple(b.shape(x)), shape) != shape and not any(is_symbolic(s) for s in shape):
        raise Diagnostic(f"{where}: input of shape {format_shape(b.shape(x))} cannot be broadcast to the "
                         f"product's shape {format_shape(shape)}")
    return b.as_tensor(result, dtype)


def _fused(name: str, base: str, ranks: tuple, reduce_batch: bool = False):
    first, second = {"addmm": ("mat1", "mat2"), "addmv": ("mat", "vec"), "addr": ("vec1", "vec2")}.get(
        name, ("batch1", "batch2"))

    def rule(b, input, m1, m2, *, beta=1, alpha=1):
        where = f"torch.{name}()"
        x1, x2 = _operands(b, m1, m2, where)
        _check_ranks(b, x1, x2, ranks, where)

        def product(widen):
            p = outer(b, widen(x1), widen(x2)) if base == "outer" else _product(b, widen(x1), widen(x2), where)
            return op(b, "sum", p, [0]) if reduce_batch else p
        return _add_scaled(b, input, product, beta, alpha, where)
    rule.__name__ = name
    rule.__doc__ = f"torch.{name}: beta * input + alpha * {base}({first}, {second})" + \
        (", summed over the batch." if reduce_batch else ".")
    return rule


for _name, _args in {"addmm": ("mm", (2, 2)), "addmv": ("mv", (2, 1)), "addr": ("outer", (1, 1)),
                     "baddbmm": ("bmm", (3, 3)), "addbmm": ("bmm", (3, 3))}.items():
    torch_rule(getattr(torch, _name), getattr(torch.Tensor, _name), methods=(_name,))(
        _fused(_name, *_args, reduce_batch=_name == "addbmm"))


# ----------------------------------------------------------------------------------------------
# cdist
# ----------------------------------------------------------------------------------------------
def _safe_sqrt(b, s):
    """sqrt(s) with gradient 0 where s is 0 (torch's cdist backward), not the inf * 0 of sqrt's (NaN stays)."""
    zero = op(b, "equal", s, 0.0)
    return op(b, "where", zero, 0.0, op(b, "sqrt", op(b, "where", zero, 1.0, s)))


def _p_distance(b, d, p):
    """The p-norm of the differences d over the last dim."""
    a = op(b, "abs", d)
    if p == 2:
        return _safe_sqrt(b, op(b, "sum", op(b, "multiply", d, d), [-1]))
    if p == 1:
        return op(b, "sum", a, [-1])
    if p == 0:
        return op(b, "sum", b.as_tensor(op(b, "not_equal", d, 0.0), b.dtype(d)), [-1])
    if p == math.inf:
        return op(b, "max", a, [-1])
    return op(b, "power", op(b, "sum", op(b, "power", a, float(p)), [-1]), 1.0 / p)


COMPUTE_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


@torch_rule(torch.cdist)
def cdist(b, x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """torch.cdist: the p-norm distance of each row of x1 to each row of x2 (batch dims broadcast),
    from the differences (any p >= 0, inf too); halves computed in float32. compute_mode only picks
    torch's algorithm (the values agree to rounding), so every mode computes the same here."""
    where = "torch.cdist()"
    x1, x2 = tensor(b, x1, where), tensor(b, x2, where)
    if not (is_float_dtype(b.dtype(x1)) and is_float_dtype(b.dtype(x2))):
        raise Diagnostic(f"{where}: cdist only supports floating-point dtypes, got {b.describe(x1)} and "
                         f"{b.describe(x2)}")
    if b.dtype(x1) != b.dtype(x2):
        raise Diagnostic(f"{where}: X1 and X2 must have the same dtype, got {b.dtype(x1)} and {b.dtype(x2)}")
    if b.ndim(x1) < 2 or b.ndim(x2) < 2:
        raise Diagnostic(f"{where}: cdist only supports at least 2D tensors, got {b.describe(x1)} and {b.describe(x2)}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0:
        raise Diagnostic(f"{where}: cdist only supports non-negative p values, got {p!r}")
    if compute_mode not in COMPUTE_MODES:
        raise Diagnostic(f"{where}: {compute_mode!r} is not a valid value for compute_mode")
    s1, s2 = b.shape(x1), b.shape(x2)
    require(b, equal(s1[-1], s2[-1]), f"{where}: X1 and X2 must have the same number of columns. "
                                      f"X1: {s1[-1]} X2: {s2[-1]}")
    dtype = b.dtype(x1)
    wide = "float32" if dtype in HALVES else dtype
    rows, columns = op(b, "expand_dims", b.as_tensor(x1, wide), -2), op(b, "expand_dims", b.as_tensor(x2, wide), -3)
    d = op(b, "subtract", rows, columns)  # (..., P, R, M)
    return b.as_tensor(_p_distance(b, d, p), dtype)


# ----------------------------------------------------------------------------------------------
# diff, norms, trace, kron
# ----------------------------------------------------------------------------------------------
def _size_less_one(size):
    """size - 1 as the end of a slice (0 for a size 0)."""
    return max(size - 1, 0) if isinstance(size, int) else tvm.tirx.max(size - 1, tvm.tirx.const(0, "int64"))


@torch_rule(torch.diff, torch.Tensor.diff, methods=("diff",))
def diff(b, input, n=1, dim=-1, prepend=None, append=None):
    """torch.diff: x[1:] - x[:-1] along dim, n times (logical xor for bools), after prepend/append."""
    x = tensor(b, input, "torch.diff()")
    if b.ndim(x) == 0:
        raise Diagnostic("torch.diff(): diff expects input to be at least one-dimensional")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise Diagnostic(f"torch.diff(): order must be a non-negative int, got {n!r}")
    axis = one_dim(b, x, dim, "torch.diff()")
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is not None and (not b.is_tensor(extra) or b.ndim(extra) != b.ndim(x)):
            raise Diagnostic(f"torch.diff(): {name} must be a tensor with the input's number of dims "
                             f"({b.ndim(x)}), got {b.describe(extra)}")
    parts = [v for v in (prepend, x, append) if v is not None]
    x = cat(b, parts, axis) if len(parts) > 1 else x
    subtract = "logical_xor" if b.dtype(x) == "bool" else "subtract"
    for _ in range(n):
        size = b.shape(x)[axis]
        later, earlier = sliced(b, x, axis, 1, size), sliced(b, x, axis, 0, _size_less_one(size))
        if is_symbolic(size):  # Relax writes the two slices' sizes differently: one shape (proved equal)
            earlier = op(b, "reshape", earlier, list(b.shape(later)))
        x = op(b, subtract, later, earlier)
    return x


# matrix_norm's ord -> (the dim of `dim` summed over, the reduction of those sums over the other)
MATRIX_ORDS = {1: (-2, "max"), -1: (-2, "min"), math.inf: (-1, "max"), -math.inf: (-1, "min")}


@torch_rule(torch.linalg.matrix_norm)
def matrix_norm(b, A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """torch.linalg.matrix_norm: 'fro', and 1/-1/inf/-inf (the max/min of the absolute column/row sums);
    'nuc' and 2/-2 need singular values, which @jit code has not."""
    where = "torch.linalg.matrix_norm()"
    x = tensor(b, A, where)
    x = _with_dtype(b, x, dtype)
    axes = dims(b, x, list(dim) if isinstance(dim, (tuple, list)) else dim, where)
    if axes is None or len(axes) != 2 or axes[0] == axes[1]:
        raise Diagnostic(f"{where}: dim must be a 2-tuple of different dims, got {dim!r}")
    if ord == "fro":
        return _vector_norm(b, x, 2, axes, keepdim, where)
    if ord not in MATRIX_ORDS:
        raise Diagnostic(f"{where}: ord={ord!r} is not supported in @jit code (it needs singular values); "
                         "supported: 'fro', 1, -1, inf, -inf")
    if not is_float_dtype(b.dtype(x)):
        raise Diagnostic(f"{where}: expected a float tensor, got {b.describe(x)} (torch refuses it too)")
    which, extreme = MATRIX_ORDS[ord]
    summed_axis, kept_axis = (axes[0], axes[1]) if which == -2 else (axes[1], axes[0])
    sums = op(b, "sum", op(b, "abs", x), [summed_axis], True)
    result = op(b, extreme, sums, [kept_axis], True)
    return result if keepdim else op(b, "squeeze", result, sorted(axes))


@torch_rule(torch.linalg.norm)
def linalg_norm(b, A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """torch.linalg.norm: a vector norm over one dim (or all, flattened, when ord is None), a matrix norm
    over two dims (or of a 2-d input)."""
    x = tensor(b, A, "torch.linalg.norm()")
    two = isinstance(dim, (tuple, list)) and len(dim) == 2 or dim is None and ord is not None and b.ndim(x) == 2
    if isinstance(ord, str) or two:
        return matrix_norm(b, x, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
    if dim is None and ord is not None and b.ndim(x) != 1:
        raise Diagnostic("torch.linalg.norm(): input must be 1-D or 2-D when dim is None and ord is not None")
    return vector_norm(b, x, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


@torch_rule(torch.trace, torch.Tensor.trace, methods=("trace",))
def trace(b, input):
    """torch.trace: the sum of a matrix's main diagonal (integers sum in int64, as torch)."""
    x = tensor(b, input, "torch.trace()")
    if b.ndim(x) != 2:
        raise Diagnostic(f"torch.trace(): expected a matrix, got {b.describe(x)}")
    return op(b, "sum", diagonal(b, x))


@torch_rule(torch.kron, torch.Tensor.kron, methods=("kron",))
def kron(b, input, other):
    """torch.kron: each element of input times the whole of other, laid out as blocks (ranks aligned
    by leading 1s)."""
    x, y = tensor(b, input, "torch.kron()"), tensor(b, other, "torch.kron()")
    rank = max(b.ndim(x), b.ndim(y))
    xs = [1] * (rank - b.ndim(x)) + list(b.shape(x))
    ys = [1] * (rank - b.ndim(y)) + list(b.shape(y))
    a = op(b, "reshape", x, [s for n in xs for s in (n, 1)])
    c = op(b, "reshape", y, [s for n in ys for s in (1, n)])
    return op(b, "reshape", op(b, "multiply", a, c), [m * n for m, n in zip(xs, ys)])
