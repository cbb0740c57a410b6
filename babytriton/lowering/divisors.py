"""Index arithmetic never divides by zero. TVM's common-subexpression elimination hoists a division by
a symbolic size (`i // d2`, `i % d2`: the position in a fused loop over an axis of size d2) out of the
loop it sat in, to where it runs even when that loop runs no step: with an empty axis (d2 = 0) the
process died of SIGFPE (fuzz 48000520: the std of a (7, 1, 0) tensor). A divisor that is a size
becomes max(divisor, 1), equal to it wherever the division indexes an element; a division by data or
by a scalar argument keeps what its operator wrote (torch's `x % y` guards a zero y)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..schedules.analysis import find_all

_DIVISIONS = (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)


def nonzero_divisors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A CPU kernel with each integer division by a size (an expression of its buffers' symbolic
    sizes, no subtraction, no negative constant) dividing by at least 1. A scalar argument is no size:
    `x // n` of a Triton kernel's negative n divides by n. (A GPU's integer division by zero does not
    trap; there the guard kept TVM from proving a bfloat16 vector whole, and its CUDA code generator
    failed on the vector's type: fuzz 48002758.)"""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm":
        return func
    sizes = [v for p in func.params if isinstance(getattr(p, "ty", None), tirx.BufferType)
             for d in p.ty.shape for v in tirx.analysis.undefined_vars(d)]

    def guarded(node):
        divisor = node.b
        if not _size(divisor, sizes):
            return node
        return type(node)(node.a, tirx.Max(divisor, tirx.const(1, divisor.ty.dtype)))
    return func.with_body(tvm_ffi.structural_map(func.body, [(_DIVISIONS, guarded)]))


def _size(expr, sizes: list) -> bool:
    """Whether `expr` is a non-negative integer expression of `sizes` that may be 0 (not a constant)."""
    if isinstance(expr, tirx.IntImm) or not str(expr.ty.dtype).startswith("int"):
        return False
    names = tirx.analysis.undefined_vars(expr)
    return bool(names) and all(any(v.same_as(s) for s in sizes) for v in names) and not find_all(
        expr, tvm.ir.TensorLoad) and not find_all(expr, tirx.Sub) and not any(
        c.value < 0 for c in find_all(expr, tirx.IntImm))
