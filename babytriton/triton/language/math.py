"""`tl.math`: Triton's math namespace; each name is the same builtin object as in `tl`."""
from .core import (abs, ceil, cdiv, cos, erf, exp, exp2, fdiv, floor, fma, log, log2, maximum, minimum, rsqrt,
                   sigmoid, sin, sqrt, sqrt_rn, umulhi)

__all__ = ["abs", "ceil", "cdiv", "cos", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "maximum",
           "minimum", "rsqrt", "sigmoid", "sin", "sqrt", "sqrt_rn", "umulhi"]
