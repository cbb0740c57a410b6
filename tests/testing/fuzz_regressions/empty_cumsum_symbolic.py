# fatal (fixed): SIGSEGV: TVM's scan kernel stored its first element past an empty result (a symbolic size 0 at run time)
# babytriton fuzz program, seed 7008021240
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0',), 'float64'), s0, s1: int, k: bt.constexpr):
    v0 = cumsum(x0, axis=-1)
    v1a, v1b = cumsum(v0 ** 3, axis=0), (s1 / (abs(v0) + 1)).astype('float32')
    return v1b


ARGS = [('tensor', (0,), 'float64', {'view': 'neg'}), ('scalar', 'auto-int', 2), ('scalar', 'int', 2), ('constexpr', 1.5)]
SEED = 7008021240
TOLERANCES = [(9.536753181826069e-07, 0.0)]
