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

from ..schedules.analysis import find_all, sizes_analyzer

_DIVISIONS = (tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod)


def nonzero_divisors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A CPU kernel with each integer division by a size (an expression that reads no data and is
    provably non-negative, its buffers' symbolic sizes being so) dividing by at least 1. A scalar
    argument is no size: `x // n` of a Triton kernel's negative n divides by n. (A GPU's integer
    division by zero does not trap; there the guard kept TVM from proving a bfloat16 vector whole, and
    its CUDA code generator failed on the vector's type: fuzz 48002758.)"""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm":
        return func
    sizes = sizes_analyzer(func)

    def guarded(node):
        divisor = node.b
        if isinstance(divisor, tirx.IntImm) or not str(divisor.ty.dtype).startswith("int") or find_all(
                divisor, tvm.ir.TensorLoad) or not sizes.can_prove(divisor >= 0):
            return node
        return type(node)(node.a, tirx.Max(divisor, tirx.const(1, divisor.ty.dtype)))
    return func.with_body(tvm_ffi.structural_map(func.body, [(_DIVISIONS, guarded)]))
