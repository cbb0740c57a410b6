# Fixed: `(s0 - x3) * i` in a loop with a run-time trip count was float64 (s0 passed in lost its
# weakness), so v0 changed from float32 to float64 in the loop.
# compile-error: torch runs the program; babytriton refuses it
# 'v0' changes from a float32 tensor of shape (1, 4) to a float64 tensor of shape (1, 4) in the loop on line 9, compiled as a recursive function (its trip count is only known at run time); a carried variable keeps one dtype (convert with .astype())
# babytriton fuzz program, seed 7013021124
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 'd1'), 'int64'), x1, x2: bt.Tensor((1, 1), 'bool'), x3: bt.Tensor((1, 4), 'int64'), s0: float, s1: int):
    v0 = x1
    for i in range(s1):
        v0 = v0 + ((s0 - x3) * i)
    v1 = v0.astype('float64')
    return v1


ARGS = [('tensor', (1, 4), 'int64'), ('tensor', (1, 4), 'float32'), ('tensor', (1, 1), 'bool', {'view': 'T'}), ('tensor', (1, 4), 'int64'), ('scalar', 'float', 0.0), ('scalar', 'int', -1)]
SEED = 7013021124
TOLERANCES = [(0.0, 0.0)]
