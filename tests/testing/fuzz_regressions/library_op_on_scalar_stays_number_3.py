# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# result 0: dtype: compiled torch.float64, torch torch.float32
# babytriton fuzz program, seed 7013021108
import torch
import babytriton as bt


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0, s0):
    v0 = (x0 ** 2) % (abs(s0) + 1)
    v1 = where(1.5 >= x0, s0, v0)
    v2a, v2b = sum(v1, axis=(0, 1)), (bt.argmin(multiply(v0, s0), axis=1)) + v1
    return v2b, v2a


ARGS = [('tensor', (4, 1, 1), 'int32', {'view': 'step'}), ('scalar', 'auto-float', 0.25)]
SEED = 7013021108
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
