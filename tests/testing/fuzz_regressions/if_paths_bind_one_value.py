# compile-error: torch runs the program; babytriton refuses it
# name 'v0' is not defined; assign it before this line, pass it as a parameter, or define it at module level
# Found: `v0 = x0 ** 1` (which is x0 itself) and `v0 = x0` on the two paths of a run-time `if`: the merge
# skipped a name both paths give one value, so v0 was undefined after the `if`. Fixed: such a name is
# bound to that value (codegen/control.py merge).
# babytriton fuzz program, seed 8000026339
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'float32')):
    if x0.min() < 2.0:
        v0 = x0 ** 1
    else:
        v0 = x0
    if (relu6(x0)).min() < 3:
        v1 = cumsum(v0, axis=-1)
    else:
        v1 = v0 * (gelu(v0))
    v2a, v2b = (-x0).prod(axis=0), (astype(v0, 'float16')) / (abs(v1) + 1)
    v3 = variance(((v1 - v0).sum(axis=0)) / (abs((v0 ** 0) / (abs(astype(v0, 'float16')) + 1)) + 1))
    return v3


ARGS = [('tensor', (1,), 'float32')]
SEED = 8000026339
TOLERANCES = [(1.0014846803145698, 0.0)]
