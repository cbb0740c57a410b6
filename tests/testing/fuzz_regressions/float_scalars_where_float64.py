# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# dtype: compiled torch.float64, torch torch.float32
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'bool'), s0: float, s1):
    v0b = (s0 if x0 else s1).reshape(1, 1)
    return v0b
ARGS = [('tensor', (1,), 'bool'), ('scalar', 'float', -1.75), ('scalar', 'auto-float', 1.0)]
SEED = 2026006172
TOLERANCES = None
