# Found by the fuzzer (seed 7000047): `zeros_like(astype(x1, 'int32'))` inside a branch of a run-time
# `if` failed in FuseOps ("Variable gv2 could not be found in any group"): once legalized, zeros_like
# no longer reads its argument, and FuseOps fails on the dead binding inside an If's branch (outside
# one it only warns). Fixed: dead bindings are removed just before FuseOps.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, x2: bt.Tensor(('d1',), 'float32')):
    if x0.sum() < 2:
        v1 = zeros_like(astype(x1, 'int32')) + x2
    else:
        v1 = x2
    return x0, v1


ARGS = [('tensor', (2,), 'int64'), ('tensor', (1,), 'int8'), ('tensor', (2,), 'float32')]
SEED = 7000047
TOLERANCES = None
