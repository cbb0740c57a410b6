# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# values differ at (15, 0, 0): compiled 1.5, torch nan (fixed-seed batch 0, program 93)
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0):
    v4 = bt.clip(x0, 0.5, 1.5)
    return v4
ARGS = [('tensor', (16, 1, 2), 'bfloat16', {'special': 0.05})]
SEED = 93
TOLERANCES = None
