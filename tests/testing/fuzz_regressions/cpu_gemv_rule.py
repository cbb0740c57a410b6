# Found by the fuzzer (seed 1000477): summing a broadcast add over its middle axis failed to
# compile: Dlight's CPU GEMV rule asserts on the fused kernel (an AssertionError in its
# normalize). Fixed: a Dlight rule that fails on a kernel declines it and the next rule takes it.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x3):
    v2 = bt.sum(x0 + x3, dim=-2)
    return v2


ARGS = [('tensor', (1, 2), 'int32'), ('tensor', (1, 3, 2), 'float16')]
SEED = 1000477
TOLERANCES = None
