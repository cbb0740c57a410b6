# torch-mismatch: babytriton's result differs from torch's
# result 0: values differ at (5,): compiled 1.0, torch 0.0 (atol 0, rtol 0; 12 of 17 differ)
# Found (fuzzer, seed 41005756, CUDA run on the H200 host): `v1 == v1` of a float tensor was True
# at NaN: FuseTIR gives both operands one buffer, and TVM's simplifier folds `x == x` to True as if
# floats were real numbers. Fixed: float `==` keeps its right side from the simplifier
# (operators/legalize.py float_equal), as subtraction does; half dtypes too.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1):
    v1 = cumsum(x0, axis=-1)
    return v1 == v1, x0 == x0, x1 == x1, x1.astype('float16') == x1.astype('float16')


ARGS = [('tensor', (17,), 'float32', {'special': 0.2}), ('tensor', (4, 9), 'bfloat16', {'special': 0.3})]
SEED = 41005756
TOLERANCES = None
CUDA = True
