# Found by the fuzzer (seed 36000376, with --cuda): `(x1 + x0).reshape(0) % x0`, the reshape's source
# computed before the integer `%`'s divide-by-zero check (an assert between two dataflow blocks):
# views.py moved the `%` before the reshape and read the source, a dataflow var of the first block,
# from the second ("Var gv1 is not defined" at build). Fixed: its rewrites read sources of their own
# block only.
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'int32'), x1: bt.Tensor((0,), 'int16'), x2: bt.Tensor((0,), 'float32')):
    v0a, v0b = ((x1 + x0).reshape(0) % x0, x1 == x2)
    v1b = (x2 > v0a, v0a)
    return v1b
ARGS = [('tensor', (1,), 'int32'), ('tensor', (0,), 'int16'), ('tensor', (0,), 'float32')]
SEED = 36000376
TOLERANCES = None
