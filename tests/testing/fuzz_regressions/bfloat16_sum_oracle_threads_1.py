# Found by the threaded fuzzer on the 16-core GPU machine (seeds 8100024361, 8100024323): a long
# bfloat16 sum differed from torch's by 1-8 ulps. babytriton's answer was the exactly rounded one;
# torch's multi-threaded CPU sum rounds per-thread partials. Fixed in the oracle: torch's reference
# runs on one thread (fuzz._one_torch_thread).
# babytriton fuzz program, seed 8100024361
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x):
    v = x
    r = sum(v)
    return r


ARGS = [('tensor', (71320,), 'bfloat16')]
SEED = 8100024361
TOLERANCES = [(0.0, 0.00390625)]
