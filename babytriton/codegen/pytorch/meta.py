"""What a tensor says of itself, as torch spells it: `x.size()`, `x.size(d)`, `x.dim()`, `x.numel()`,
`x.element_size()`, `x.is_floating_point()`, `x.is_contiguous()`, and `torch.finfo` / `torch.iinfo`.
All are known at compile time (sizes may be symbolic: TIR expressions of the sizes a call brings),
so model code can compute shapes and pick paths with them."""
from __future__ import annotations

import math

import torch

from ...core.errors import Diagnostic
from ...core.types import DTYPES, dtype_name, is_float_dtype
from .registry import dim as axis_of, tensor, torch_rule


@torch_rule(torch.Tensor.size, methods=("size",), name="Tensor.size")
def size(b, input, dim=None):
    """`x.size()`: the shape as a tuple (indexing, slicing, len and unpacking as torch.Size); `x.size(d)`."""
    x = tensor(b, input, "Tensor.size()")
    if dim is None:
        return tuple(b.shape(x))
    if b.ndim(x) == 0:  # torch: "dimension specified as 0 but tensor has no dimensions"
        raise Diagnostic(f"Tensor.size(): dimension specified as {dim} but tensor has no dimensions")
    return b.shape(x)[axis_of(b, x, dim, "Tensor.size()")]


@torch_rule(torch.Tensor.dim, methods=("dim", "ndimension"), name="Tensor.dim")
def dim_count(b, input):
    """`x.dim()`, `x.ndimension()`: the number of axes."""
    return b.ndim(tensor(b, input, "Tensor.dim()"))


@torch_rule(torch.numel, torch.Tensor.numel, methods=("numel", "nelement"))
def numel(b, input):
    """The number of elements: an int, or the product of symbolic sizes (known when the code runs)."""
    return math.prod(b.shape(tensor(b, input, "torch.numel()")))


@torch_rule(torch.Tensor.element_size, methods=("element_size",), name="Tensor.element_size")
def element_size(b, input):
    """Bytes per element of the tensor's dtype."""
    return DTYPES[b.dtype(tensor(b, input, "Tensor.element_size()"))].itemsize


@torch_rule(torch.is_floating_point, torch.Tensor.is_floating_point, methods=("is_floating_point",))
def is_floating_point(b, input):
    """Whether the dtype is float16/bfloat16/float32/float64: a compile-time bool."""
    return is_float_dtype(b.dtype(tensor(b, input, "torch.is_floating_point()")))


@torch_rule(torch.is_complex, torch.Tensor.is_complex, methods=("is_complex",))
def is_complex(b, input):
    """False: babytriton has no complex dtypes."""
    tensor(b, input, "torch.is_complex()")
    return False


@torch_rule(torch.Tensor.is_contiguous, methods=("is_contiguous",), name="Tensor.is_contiguous")
def is_contiguous(b, input, memory_format=torch.contiguous_format):
    """True: @jit code's tensors are values, laid out row-major."""
    tensor(b, input, "Tensor.is_contiguous()")
    if memory_format is not torch.contiguous_format:
        raise Diagnostic(f"Tensor.is_contiguous(): memory_format={memory_format} is not supported in @jit "
                         "code (its tensors are row-major values)")
    return True


def _info(kind, test, what: str, type):
    """torch.finfo / torch.iinfo of a dtype (a name, x.dtype, or a torch.dtype): compile-time numbers."""
    where = f"torch.{kind.__name__}()"
    try:
        name = dtype_name(torch.get_default_dtype() if type is None else type)
    except ValueError as e:
        raise Diagnostic(f"{where}: {e}") from None
    if not test(name):
        raise Diagnostic(f"{where} takes {what} dtype, got {name}")
    return kind(DTYPES[name])


@torch_rule(torch.finfo, name="torch.finfo")
def finfo(b, type=None):
    """`torch.finfo(x.dtype)`: .min, .max, .eps, .tiny, .bits, .resolution as compile-time numbers."""
    return _info(torch.finfo, is_float_dtype, "a floating-point", type)


@torch_rule(torch.iinfo, name="torch.iinfo")
def iinfo(b, type):
    """`torch.iinfo(x.dtype)`: .min, .max, .bits as compile-time numbers."""
    return _info(torch.iinfo, lambda n: n != "bool" and not is_float_dtype(n), "an integer", type)
