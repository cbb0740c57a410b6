# Found by the fuzzer (seed 94): `x ** 2` on a bfloat16 tensor failed in TVM's LegalizeOps
# ("power only applies to float": TVM's pow has no bfloat16). Fixed: bfloat16 powers compute in
# float32 and round once, as torch does.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'bfloat16')):
    return x0 ** 2, x0 ** 3, power(x0, x0), x0 ** 0.5


ARGS = [('tensor', (3,), 'bfloat16')]
SEED = 94
TOLERANCES = None
