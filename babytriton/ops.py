"""Operators for @jit code, spelled out so that editors can complete and document them: `bt.softmax`.

Each name here is one of TVM's Relax operators, with Relax's parameter names and defaults. Inside a
@jit function `bt.softmax(x, axis=-1)` compiles to `R.nn.softmax`; the bare name `softmax(x)` and
`R.nn.softmax(x)` mean the same. Every other Relax operator works too, by its bare name or through
`tvm.relax.op`; this module lists the common ones. Python numbers passed as tensors take the tensors'
dtype; `axis` takes an int or a tuple; `dtype` takes a name ("float16") or a torch dtype; torch's
`dim=` / `keepdim=` spellings are accepted for `axis=` / `keepdims=`.

These are compiler operations: called outside a @jit function they raise.
"""
from __future__ import annotations

import functools

__all__ = [
    # element-wise
    "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf", "floor", "ceil", "round",
    "sign", "negative", "square", "isnan", "isinf", "isfinite", "maximum", "minimum", "power", "where", "clip",
    # reductions
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "cumsum",
    # neural-network
    "relu", "gelu", "silu", "softmax", "log_softmax", "layer_norm", "rms_norm",
    # linear algebra and shapes
    "matmul", "reshape", "permute_dims", "concat", "stack", "squeeze", "expand_dims", "broadcast_to",
    "flatten", "astype", "tril", "triu",
    # creation
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
]


def _relax_op(stub):
    """Turn a documented signature into the marker the compiler resolves (by the Relax op's name)."""
    @functools.wraps(stub)
    def outside_jit(*args, **kwargs):
        raise RuntimeError(f"bt.{stub.__name__}() is a compiler operation: call it inside a @bt.jit function")
    outside_jit.__babytriton_op__ = stub.__name__
    return outside_jit


# -- element-wise ------------------------------------------------------------------------------
@_relax_op
def abs(x):
    """|x|, element-wise."""


@_relax_op
def exp(x):
    """e**x, element-wise (float tensors)."""


@_relax_op
def log(x):
    """Natural logarithm, element-wise (float tensors)."""


@_relax_op
def sqrt(x):
    """Square root, element-wise (float tensors)."""


@_relax_op
def rsqrt(x):
    """1 / sqrt(x), element-wise (float tensors)."""


@_relax_op
def sin(x):
    """Sine, element-wise (float tensors)."""


@_relax_op
def cos(x):
    """Cosine, element-wise (float tensors)."""


@_relax_op
def tanh(x):
    """Hyperbolic tangent, element-wise (float tensors)."""


@_relax_op
def sigmoid(x):
    """1 / (1 + exp(-x)), element-wise (float tensors)."""


@_relax_op
def erf(x):
    """The error function, element-wise (float tensors)."""


@_relax_op
def floor(x):
    """Round down, element-wise."""


@_relax_op
def ceil(x):
    """Round up, element-wise."""


@_relax_op
def round(x):
    """Round to the nearest integer, halves to even, element-wise."""


@_relax_op
def sign(x):
    """-1, 0 or 1 by the sign of x, element-wise."""


@_relax_op
def negative(x):
    """-x, element-wise."""


@_relax_op
def square(x):
    """x * x, element-wise."""


@_relax_op
def isnan(x):
    """Whether x is NaN, element-wise (a bool tensor)."""


@_relax_op
def isinf(x):
    """Whether x is +-infinity, element-wise (a bool tensor)."""


@_relax_op
def isfinite(x):
    """Whether x is neither NaN nor infinite, element-wise (a bool tensor)."""


@_relax_op
def maximum(x1, x2):
    """The larger of x1 and x2, element-wise with broadcasting; dtypes promote as in torch."""


@_relax_op
def minimum(x1, x2):
    """The smaller of x1 and x2, element-wise with broadcasting; dtypes promote as in torch."""


@_relax_op
def power(x1, x2):
    """x1 ** x2, element-wise with broadcasting (float tensors)."""


@_relax_op
def where(condition, x1, x2):
    """x1 where the bool `condition` holds, else x2; x1 and x2 promote to one dtype."""


@_relax_op
def clip(x, min, max):
    """x limited to [min, max]; the bounds are compile-time numbers."""


# -- reductions: axis=None reduces every axis, as torch does ------------------------------------
@_relax_op
def sum(x, axis=None, keepdims=False):
    """Sum over `axis` (an int, a tuple, or None for all)."""


@_relax_op
def mean(x, axis=None, keepdims=False):
    """Mean over `axis` (an int, a tuple, or None for all)."""


@_relax_op
def max(x, axis=None, keepdims=False):
    """Maximum over `axis`: the values only (torch's max(dim=) also returns indices; use argmax)."""


@_relax_op
def min(x, axis=None, keepdims=False):
    """Minimum over `axis`: the values only (torch's min(dim=) also returns indices; use argmin)."""


@_relax_op
def prod(x, axis=None, keepdims=False):
    """Product over `axis` (an int, a tuple, or None for all)."""


@_relax_op
def argmax(x, axis=None, keepdims=False):
    """Index of the maximum along `axis` (None: of the flattened tensor), as int64."""


@_relax_op
def argmin(x, axis=None, keepdims=False):
    """Index of the minimum along `axis` (None: of the flattened tensor), as int64."""


@_relax_op
def cumsum(data, axis=None, dtype=None, exclusive=False):
    """Running sum along `axis` (None: of the flattened tensor)."""


# -- neural-network operators (Relax's nn namespace) --------------------------------------------
@_relax_op
def relu(data):
    """max(x, 0), element-wise."""


@_relax_op
def gelu(data):
    """GELU with the exact erf form, element-wise."""


@_relax_op
def silu(data):
    """x * sigmoid(x), element-wise."""


@_relax_op
def softmax(data, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`."""


@_relax_op
def log_softmax(data, axis=-1):
    """log(softmax(x)) along `axis`, computed stably."""


@_relax_op
def layer_norm(data, gamma, beta, axes, epsilon=1e-05, center=True, scale=True):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over `axes` (an int or a tuple, e.g. -1)."""


@_relax_op
def rms_norm(data, weight, axes=-1, epsilon=1e-05):
    """x / sqrt(mean(x**2) + epsilon) * weight over `axes`."""


# -- linear algebra and shapes ------------------------------------------------------------------
@_relax_op
def matmul(x1, x2, out_dtype=None):
    """Matrix product with batch broadcasting, like `x1 @ x2`; `out_dtype` sets the result's dtype."""


@_relax_op
def reshape(x, shape):
    """The same elements in `shape`; one entry may be -1."""


@_relax_op
def permute_dims(x, axes=None):
    """Axes reordered as `axes` (None: reversed, like x.T)."""


@_relax_op
def concat(tensors, axis=0):
    """A tuple of tensors joined along an existing `axis`."""


@_relax_op
def stack(tensors, axis=0):
    """A tuple of equally shaped tensors joined along a new `axis`."""


@_relax_op
def squeeze(x, axis=None):
    """Size-1 axes removed (`axis`: which; None: all)."""


@_relax_op
def expand_dims(x, axis):
    """A size-1 axis inserted at `axis` (an int or a tuple)."""


@_relax_op
def broadcast_to(x, shape):
    """x broadcast to `shape`."""


@_relax_op
def flatten(x):
    """The elements as a 1-d tensor."""


@_relax_op
def astype(x, dtype):
    """x converted to `dtype` (a name like "float16" or a torch dtype)."""


@_relax_op
def tril(x, k=0):
    """The lower triangle of the last two axes (diagonal offset `k`), zeros above."""


@_relax_op
def triu(x, k=0):
    """The upper triangle of the last two axes (diagonal offset `k`), zeros below."""


# -- creation -----------------------------------------------------------------------------------
@_relax_op
def zeros(shape, dtype):
    """A tensor of zeros."""


@_relax_op
def ones(shape, dtype):
    """A tensor of ones."""


@_relax_op
def full(shape, fill_value, dtype=None):
    """A tensor filled with `fill_value`."""


@_relax_op
def zeros_like(x, dtype=None):
    """Zeros with x's shape (and dtype, unless given)."""


@_relax_op
def ones_like(x, dtype=None):
    """Ones with x's shape (and dtype, unless given)."""


@_relax_op
def full_like(x, fill_value, dtype=None):
    """`fill_value` with x's shape (and dtype, unless given)."""
