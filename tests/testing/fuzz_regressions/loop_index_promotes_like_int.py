# Found by the fuzzer (seed 1277 of a 2,000-program run): in a loop compiled as a recursive function
# (24 > unroll), `i` is a 0-d int64 tensor and `x0 * i` promoted an int16 0-d x0 to int64, so the
# `continue` path and the other disagreed on v0's dtype. Fixed: a recursive loop's index promotes like
# the Python int it is in the unrolled form and in torch.
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0):
    for i in range(24):
        if i == 5:
            continue
        v0 = x0 * i
    return v0
ARGS = [('tensor', (), 'int16')]
SEED = 1277
TOLERANCES = None
