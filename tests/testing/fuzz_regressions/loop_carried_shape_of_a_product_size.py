# compile-error: torch runs the program; babytriton refuses it
# 'v2' changes shape from (d0 * T.int64(2), 1) to (None, None) from one iteration to the next of the loop on line 11, compiled as a recursive function (its trip count 19 is above unroll=16); a carried variable keeps one shape
# Found: a carried (d0 * 2, 1) tensor through a recursive loop with `continue` was refused: the trial
# compile of the body did not declare d0, so the `If` of the `continue` erased the shape to (None, None).
# Fixed: the trial declares the sizes no carried tensor has as a dimension, as the loop functions do.
# babytriton fuzz program, seed 8000026243
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'bool'), x1: bt.Tensor(('d0', 1), 'float32'), s0: int):
    v0a, v0b = concat((s0 + (x1 * s0), x1), axis=0), (permute_dims(x1)) @ x1
    v1a, v1b = log_softmax(v0b, axis=0), relu6(s0 * v0a)
    v2 = v0a.astype('float64')
    for i in range(19):
        if i == 1:
            continue
        v2 = maximum(v2, (permute_dims(v1a / (abs(v0a) + 1))) @ (v1a / (abs(v0a) + 1)))
    v3a, v3b = v2 - (s0 % (abs(v0a) + 1)), stack((triu(v0b, -1), v0b))
    v4 = v0b * (v0a ** 0)
    return v4, v1b, v1a


ARGS = [('tensor', (2,), 'bool'), ('tensor', (2, 1), 'float32'), ('scalar', 'int', -1)]
SEED = 8000026243
TOLERANCES = [(1.1444092796875e-05, 0.0), (0.0, 0.0), (3.639114773934905e-05, 0.0)]
