# Found by the fuzzer (seed 8001315): `where(x1, v0, x1)` choosing between bool tensors, fused after
# an argmin, failed in LLVM code generation ("mismatched types. False type: boolx4; True type:
# int8x4"): the vectorised select mixed a bool parameter with an internal bool buffer (stored as
# int8). Fixed: `where` and `a if c else b` choose between bools as int8, as comparisons do.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1, x2):
    v0 = logical_xor(argmin(x1, dim=-2), 2.0 >= x1)
    v1a, v1b = (where(x1, v0, x1) > x2, v0)
    v2 = v1a.sum(axis=2, keepdim=True)
    v3 = (argmin(x1, dim=-2) > 0) if x1 else x1
    return v2, v3


ARGS = [('tensor', (15, 4), 'bool'), ('tensor', (1, 15, 4), 'float64')]
SEED = 8001315
TOLERANCES = None
