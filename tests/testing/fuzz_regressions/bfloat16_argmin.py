# Found by the fuzzer (seeds 1000134, 1000371): argmin/argmax of a bfloat16 tensor failed in TVM's
# build. Fixed: they run on a float32 copy (exact: the same order and ties).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x2: bt.Tensor(('d0', 'd1'), 'bfloat16')):
    return argmin(x2), bt.argmax(x2, keepdims=True), x2.argmax(axis=1), argmin(x2, axis=0, keepdims=True)


ARGS = [('tensor', (2, 3), 'bfloat16')]
SEED = 1000134
TOLERANCES = None
