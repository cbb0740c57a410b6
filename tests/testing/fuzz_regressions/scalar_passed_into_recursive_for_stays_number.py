# Fixed: `(-0.25) * s0` inside an 18-trip loop (a recursive function) was a float64 tensor, not a
# Python float, so `maximum` with a 0-d float32 changed v2's dtype across the loop.
# compile-error: torch runs the program; babytriton refuses it
# 'v2' changes from a float32 tensor of shape () to a float64 tensor of shape () in the loop on line 11, compiled as a recursive function (its trip count 18 is above unroll=16); a carried variable keeps one dtype (convert with .astype())
# babytriton fuzz program, seed 7008021235
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((1,), 'bool'), x2: bt.Tensor(('d0',), 'bool'), s0, s1):
    v0 = s1 > (((x0 ** 2) != (s0 - s0)) or False)
    v1a, v1b = variance((sum(x1, axis=0, keepdims=True)) * (sqrt(abs(astype(x0, 'float32')) + 1))), (x0 ** 0) + (softmax(astype(x1, 'float32'), axis=-1))
    v2 = v1a
    for i in range(18):
        v2 = maximum(v2, (-0.25) * s0)
    v3a, v3b = bt.negative(x0), x0.min()
    return v3b


ARGS = [('tensor', (2,), 'int32'), ('tensor', (1,), 'bool'), ('tensor', (2,), 'bool', {'view': 'step'}), ('scalar', 'auto-float', 1.25), ('scalar', 'auto-float', 1.0)]
SEED = 7008021235
TOLERANCES = [(0.0, 0.0)]
