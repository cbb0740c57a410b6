# Found by the fuzzer (seed 8000028503): logical_xor of full_like(x, -1.5) failed in TVM's build (it
# folded the cast of -1.5 to the bool -1). A cast to bool is now x != 0, NaN True (legalize._astype).
# babytriton fuzz program, seed 8000028503
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'float32'), x1: bt.Tensor(('d1',), 'float16'), x2, s0: bool, s1, k: bt.constexpr):
    v0 = full_like(x2, (-1.5))
    v1a, v1b = (False > v0) or (((s0 <= x0) > True) and (s1 > x0)), s0 if (logical_xor(v0, x1 != (x1 < v0))) else s1
    return v1b, x2


ARGS = [('tensor', (2,), 'float32'), ('tensor', (2,), 'float16'), ('tensor', (2,), 'float32'), ('scalar', 'bool', True), ('scalar', 'auto-bool', True), ('constexpr', 1)]
SEED = 8000028503
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
