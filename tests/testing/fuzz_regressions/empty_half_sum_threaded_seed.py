# Found by the threaded fuzzer (seed 8100024414): `x2.sum()` of an empty bfloat16 tensor failed to
# compile (the float32-accumulating legalization of a reduction that reads nothing). Fixed with
# empty_half_sum_*.py (legalize.half_accumulating_legalizations hands such calls to TVM).
# babytriton fuzz program, seed 8100024414
import torch
import babytriton as bt


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0: bt.Tensor((3, 1), 'float32'), x1: bt.Tensor((1,), 'float32'), x2: bt.Tensor((1, 0), 'bfloat16'), x3: bt.Tensor((0,), 'float16')):
    v0 = x2 > x3 < (x2.sum())
    v1a, v1b = (x3 @ x3) < x0, x1 % (abs(x2) + 1)
    v2a, v2b = where((x1 * 0) == (sum(x1, dim=0)), x0, x1), matmul(x3 - x2, (x3 - x2).T)
    v3 = -(x2 - (-0.25))
    return v3


ARGS = [('tensor', (3, 1), 'float32'), ('tensor', (1,), 'float32'), ('tensor', (1, 0), 'bfloat16'), ('tensor', (0,), 'float16')]
SEED = 8100024414
TOLERANCES = [(0.0, 0.0)]
