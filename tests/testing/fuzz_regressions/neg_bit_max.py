# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# values differ at (): compiled 1.875, torch 1.375 (atol 0.0001, rtol 0.0001; 1 of 1 differ)
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x1):
    v2 = x1.max()
    return v2
ARGS = [('tensor', (3,), 'float32', {'view': 'neg'})]
SEED = 2026006126
TOLERANCES = None
