# Found by the fuzzer (seed 9201029054): zeros_like of a Python number; babytriton gives a 0-d
# result, the oracle called torch.zeros_like on a float and raised. The *_like ops take a number as
# torch.as_tensor makes it, in both now.
# babytriton fuzz program, seed 9201029054
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0',), 'float32'), x1: bt.Tensor((2,), 'int16'), x2, x3: bt.Tensor((1,), 'int16'), s0: float, s1, k: bt.constexpr):
    v0 = zeros_like(s0 if k > 1 else s0)
    v1 = k if (((-1) - x2) >= (x0 @ x0)) else ((x3 == x1) and (x2 > x2 > x3))
    return v1


ARGS = [('tensor', (2,), 'float32'), ('tensor', (2,), 'int16'), ('tensor', (2,), 'int8'), ('tensor', (1,), 'int16'), ('scalar', 'float', -0.75), ('scalar', 'auto-float', 1.0), ('constexpr', True)]
SEED = 9201029054
TOLERANCES = [(0.0, 0.0)]
