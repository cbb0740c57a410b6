# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# values differ at (0,): compiled -1.625, torch nan (atol 0.0001, rtol 0.0001; 13 of 13 differ)
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x1: bt.Tensor(('d1',), 'float32'), s0: float):
    v0 = minimum(s0, x1)
    return v0
ARGS = [('tensor', (13,), 'float32'), ('scalar', 'float', 'nan')]
SEED = 2026006125
TOLERANCES = None
