# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# babytriton fuzz program, seed 7010021161
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'int32'), x1, x2):
    v0a, v0b = ((x0 % (abs(x0) + 1)) % (abs(x1.shape[0]) + 1)) ** 2, broadcast_to(x2 ** 2, (2, 2, 0))
    v1 = (cumsum(x1, axis=1)) + x1
    return v1, x0


ARGS = [('tensor', (0,), 'int32'), ('tensor', (2, 0), 'float32'), ('tensor', (2, 0), 'float32')]
SEED = 7010021161
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
