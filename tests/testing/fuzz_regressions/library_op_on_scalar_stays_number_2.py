# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# result 0: dtype: compiled torch.float64, torch torch.float32
# babytriton fuzz program, seed 7003021060
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0: bt.Tensor((3, 2, 4), 'int64'), s0):
    v0 = max_sub(s0, (((2 > x0) or (x0 > s0)) if ((s0 % (abs(x0) + 1)) > (ceil(x0)) > (x0.ndim)) else (x0 / (abs(s0) + 1))) - x0)
    v1a, v1b = v0 - (bt.sin(x0.astype('float32'))), expand_dims(v0 / (abs(x0) + 1), 3)
    return v1b, v1a, x0


ARGS = [('tensor', (3, 2, 4), 'int64'), ('scalar', 'auto-float', 2.0)]
SEED = 7003021060
TOLERANCES = [(1.0648370246381091e-12, 0.0), (9.536753741378473e-07, 0.0), (0.0, 0.0)]
