# Found by the fuzzer (seed 8102024395): `not (a >= b)` was False where a or b is NaN (torch: True).
# TVM's simplifier rewrites !(a >= b) as a < b; babytriton now negates a bool as c ^ True
# (legalize._logical_not, codegen/tir._negate).
# babytriton fuzz program, seed 8102024395
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'bool'), x1: bt.Tensor(('d0', 'd1'), 'float16'), x2: bt.Tensor(('d1',), 'bfloat16'), x3: bt.Tensor(('d0', 'd1'), 'int8'), k: bt.constexpr):
    v0a, v0b = not (x1 >= x2), erf(bt.log(abs(x1) + 1))
    v1a, v1b = subtract((-0.25), softmax(astype(v0a, 'float32'), axis=-1)), add(k, x2)
    v2a, v2b = (mean(v1b if (x3 > k) else x0, axis=1)).max(axis=0), rsqrt(abs(x1 // (abs(multiply(v1b, k)) + 1)) + 1)
    v3a, v3b = v2a * x3, v0a.astype(torch.float32)
    return v3b


ARGS = [('tensor', (4,), 'bool', {'view': 'step'}), ('tensor', (4, 4), 'float16', {'special': 0.2}), ('tensor', (4,), 'bfloat16'), ('tensor', (4, 4), 'int8'), ('constexpr', 0.5)]
SEED = 8102024395
TOLERANCES = [(0.0, 0.0)]
