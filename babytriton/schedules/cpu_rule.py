"""What babytriton's CPU rules share: the CPURule base (llvm targets), the sizes below which work stays
on the calling thread (MIN_PARALLEL...), the lanes of a vector register, and what LLVM can't vectorise."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.s_tir import dlight as dl

from .analysis import find_all, is_buffer, normalized


MIN_PARALLEL = 1 << 14   # work below this stays on the calling thread: a launch costs more
# An element-wise chain's bar is higher: one pass over its elements is all the work there is. Measured
# on torch's OpenMP threads (threads.py), sigmoid((a + b) * a - b) and GELU-tanh over 2^15 floats took
# 13 and 11 us in parallel against 21 and 19 on one thread (16-core Xeon; 2 Zen 5 cores: 7.3 against
# 9.2), and 2^14 floats took as long either way.
MIN_PARALLEL_ELEMENTWISE = 1 << 15
# A reduction's passes (one per block of a row) over 2^16 elements still ran faster on one thread: a
# 256x256 sum took 3.4 us there and 3.8 on two Zen 5 cores.
MIN_PARALLEL_REDUCTION = 1 << 16


class CPURule(dl.ScheduleRule):
    """A rule for llvm targets: `schedule(sch, infos, target)` returns whether it scheduled the kernel."""

    def is_target_available(self, target) -> bool:
        return target.kind.name == "llvm"

    def apply(self, func, target, _tunable):
        sch, infos = normalized(self, func, target)
        return sch if sch is not None and self.schedule(sch, infos, target) else None


def vector_lanes(sch, target) -> int:
    """Lanes of one vector register for the widest element the kernel touches (16 float32 with AVX-512)."""
    width = 64 if tvm.target.codegen.target_has_features("avx512f", target) else 32
    func = sch.mod["main"]
    widest = max((tvm.DataType(p.ty.dtype).bits // 8 for p in func.params if is_buffer(p)), default=4)
    return max(width // max(widest, 1), 1)


def pow2_divisor(extent, cap: int) -> int:
    """The largest power of two <= cap that divides a static extent (1 for a symbolic or zero one)."""
    if not isinstance(extent, int) or extent <= 0:
        return 1
    v = 1
    while v * 2 <= cap and extent % (v * 2) == 0:
        v *= 2
    return v


# Float intrinsics that TVM 0.27 cannot lower for a vector on llvm (compiling each one vectorised:
# "unknown intrinsic"); a kernel that calls one keeps scalar loops, which LLVM's loop vectorizer takes.
_SCALAR_ONLY = ("cosh", "sinh")


def vectorizable(sch) -> bool:
    text = sch.mod["main"].script()
    return not any(f"T.{name}(" in text for name in _SCALAR_ONLY) and not _stores_bf16_constant(sch.mod["main"])


def _stores_bf16_constant(func) -> bool:
    """Whether a block stores a bfloat16 constant (`full_like(x, nan)`): TVM's bfloat16 storage
    legalization retypes a vectorised store to uint16 lanes but keeps the broadcast constant's
    bfloat16 type, which the build refuses. LLVM's loop vectorizer takes such a fill loop instead."""
    return any(str(store.value.ty.dtype if hasattr(store.value, "ty") else store.value.dtype) == "bfloat16"
               and isinstance(store.value, tirx.FloatImm) for store in find_all(func.body, tirx.BufferStore))
