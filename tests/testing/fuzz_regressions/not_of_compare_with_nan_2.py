# Found by the fuzzer (seed 8000028769): `not (a >= b)` was False where a or b is NaN (torch: True).
# TVM's simplifier rewrites !(a >= b) as a < b; babytriton now negates a bool as c ^ True
# (legalize._logical_not, codegen/tir._negate).
# result 0: values differ at (0, 0): compiled 3.0, torch 1.375 (atol 0, rtol 0; 6 of 6 differ)
# babytriton fuzz program, seed 8000028769
import torch
import babytriton as bt


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'float32'), s0: float):
    v0a, v0b = expand_dims(x0.min(axis=-1), 1), x0 if (not (s0 < x0)) else 3
    v1a, v1b = -(select(2.0 * s0, v0a * v0b)), v0b.astype('float32')
    return v1b, v1a, s0


ARGS = [('tensor', (2, 3), 'float32', {'special': 0.05}), ('scalar', 'float', 'nan')]
SEED = 8000028769
TOLERANCES = [(0.0, 0.0), (0.0, 0.0), (0.0, 0.0)]
