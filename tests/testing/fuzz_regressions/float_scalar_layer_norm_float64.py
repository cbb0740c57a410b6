# compile-error: torch runs the program; babytriton refuses it
# layer_norm() takes float32, float16, bfloat16 tensors, got a float64 tensor of shape (1, 4); convert with .astype()
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0, s0):
    v0b = layer_norm(where(x0 == x0.shape[1], 0.5, s0), ones((4,), 'float32'), zeros((4,), 'float32'), 1)
    return v0b
ARGS = [('tensor', (1, 4), 'int16'), ('scalar', 'auto-float', -1.0)]
SEED = 2026006099
TOLERANCES = None
