# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# dtype: compiled torch.float64, torch torch.float32
# babytriton fuzz program, seed 7000021075
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0',), 'int32'), x1, s0, k: bt.constexpr):
    v0 = (bt.minimum(x0, x1)) / (abs(s0) + 1)
    return v0


ARGS = [('tensor', (7,), 'int32'), ('tensor', (7,), 'int8'), ('scalar', 'auto-float', -2.0), ('constexpr', True)]
SEED = 7000021075
TOLERANCES = [(1.0035527136788005e-12, 0.0)]
