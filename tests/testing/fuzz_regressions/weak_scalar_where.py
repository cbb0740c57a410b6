# Found by the fuzzer (seed 11000140): `s if c else s` with a run-time float `s` was float32 compiled (torch's
# where of two Python numbers) but float64 eagerly. Fixed: eager result_type counts run-time scalars as numbers.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'float16'), s):
    v0 = s if (s > x0) else s
    return v0


ARGS = [('tensor', (2, 2), 'float16'), ('scalar', 'auto-float', 0.25)]
SEED = 11000140
TOLERANCES = None
