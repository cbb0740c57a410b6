# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# dtype: compiled torch.float64, torch torch.float32
# babytriton fuzz program, seed 7100021300
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 1), 'int16'), x1, s0, s1):
    v0 = log_softmax(x0.astype(torch.float32), axis=-1)
    v1 = (floor(x1)) / (abs(s0) + 1)
    return v1


ARGS = [('tensor', (1, 1), 'int16'), ('tensor', (1,), 'int16'), ('scalar', 'auto-float', 0.25), ('scalar', 'auto-bool', True)]
SEED = 7100021300
TOLERANCES = [(1.0044408920985006e-12, 0.0)]
