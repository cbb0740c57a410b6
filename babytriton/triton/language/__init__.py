"""`import babytriton.triton.language as tl`: the names of Triton's language (dtypes, constexpr and
the builtins), each the very object the compiler looks a call up by."""
from .core import (DTYPES, abs, active_implementation, arange, argmax, argmin, atomic_add, atomic_max, atomic_min,
                   bfloat16, broadcast_to, builtin, cast, cdiv, ceil, clamp, constexpr, cos, debug_barrier,
                   device_assert, device_print, dot, dtype, erf, exp, exp2, expand_dims, fdiv, float16, float32,
                   float64, floor, fma, from_torch, full, implementation, int1, int8, int16, int32, int64, is_builtin,
                   is_jit_function, load, log, log2, max, max_constancy, max_contiguous, maximum, min, minimum,
                   multiple_of, num_programs, pointer_type, print, program_id, range, reshape, rsqrt, sigmoid, sin,
                   sqrt, sqrt_rn, static_assert, static_print, static_range, store, sum, tensor, trans, uint8, uint16,
                   uint32, uint64, umulhi, unwrap, view, where, zeros, zeros_like)
from . import math  # `tl.math.exp` is `tl.exp`

__all__ = [name for name in dir() if not name.startswith("_")]


def __getattr__(name):
    raise AttributeError(f"tl.{name} is not part of babytriton's Triton language")
