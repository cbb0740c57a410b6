# Found by the fuzzer (seeds 3000162, 3000228, 3000108): the eager reference ran `v0 += v0` as
# torch's in-place add, which changed the argument that v0 was a view of (`v0 = x0.T`, or
# `x0.astype` of x0's own dtype, which torch returns uncopied), so compiled and eager disagreed.
# Fixed in eager mode: `x += y` runs as `x = x + y`, as compiled (tensors are values).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'int16'), x1):
    v0 = x0.T
    v0 += v0
    v1 = x1.astype('int64')
    v1 -= v1.sum(axis=0)
    return x0.astype('float16'), x1, v0, v1


ARGS = [('tensor', (2, 2), 'int16'), ('tensor', (4,), 'int64')]
SEED = 3000162
TOLERANCES = None
