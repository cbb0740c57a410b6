# torch-mismatch: a reduction over a size-1 axis had the next op inlined into its init and its update
# values differ at (0,): compiled 17.375, torch 9.5
# babytriton fuzz program (minimised), seed 36
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 17), 'float32'), x1: bt.Tensor((1, 17), 'float32')):
    v1a, v1b = (x1, x0.mean(axis=-2))
    v1b += x1.sum(axis=1)
    return v1b
ARGS = [('tensor', (1, 17), 'float32'), ('tensor', (1, 17), 'float32')]
SEED = 36
TOLERANCES = None
