# compile-error: bfloat16 kernels vectorised on llvm failed to build (uint16 lanes vs bfloat16x2)
# babytriton fuzz program, seed 96
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def mul_add(a, b):
    return a * b + a


@bt.jit(cache=False)
def f(x0):
    v0 = ((x0 / (abs(x0) + 1)) ** 1) if (x0 >= ((x0.max(axis=None)) <= (-2))) else (log(abs(x0) + 1))
    v1 = v0 + v0
    v2a, v2b = 1 * v0, broadcast_to(v0, (2, 1, 6))
    v3 = -(ones_like(v1))
    return v3


ARGS = [('tensor', (1, 6), 'bfloat16')]
SEED = 96
TOLERANCES = [(0.0, 0.0)]
