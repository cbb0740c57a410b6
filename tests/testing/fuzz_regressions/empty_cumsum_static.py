# fatal (fixed): SIGABRT from corrupted memory: TVM's scan kernel stored past an empty result (cumsum over a static size 0)
# babytriton fuzz program, seed 7002021083
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((0, 1, 7), 'int32'), x1, s0: float, s1: bool, k: bt.constexpr):
    v0a, v0b = bt.sum((bt.minimum(s0, x0)) if ((where(x1 > s0, x0, s0)) < s0) else x0), astype((x1 >= s1) or ((x0 if (x1 <= k) else s0) == (cumsum(x0, axis=0)) <= x1), 'bool')
    v1a, v1b = (bt.log_softmax(x0.astype('float32'), axis=2)) / (abs(v0a) + 1), sigmoid(v0a - x0)
    v2 = broadcast_to(sqrt(abs(astype(v0b, 'float32')) + 1), (2, 0, 1, 7))
    return v2, x1, s1


ARGS = [('tensor', (0, 1, 7), 'int32'), ('tensor', (1,), 'int16'), ('scalar', 'float', -1.5), ('scalar', 'bool', False), ('constexpr', True)]
SEED = 7002021083
TOLERANCES = [(6.743505761743046e-07, 0.0), (0.0, 0.0), (0.0, 0.0)]
