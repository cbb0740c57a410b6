# cuda-build: the program builds and runs on the CPU; building it for CUDA (sm_90) failed
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Found (fuzzer, seed 11000124): an int64 product over an axis of size 1 (an (n, 1) @ (1, m)) fused with a
# float32 multiply: Dlight's normalisation dropped the unit reduction loop but kept the init, and Fallback
# inlined the multiply into the reduction ("IntImm supports only int or uint or bool type, but float32
# was supplied"; a float one would read inf * 0 = NaN at its init).
# Fixed: a reduction over unit axes is the element-wise block it is (schedules.passes.unit_reductions_as_maps).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'float32'), x1, x2, x3):
    v1 = x0 * (x1 @ x1.T)
    v2 = x2 * (x3 @ x3.T)
    v3 = x3.sum(axis=1) * x2[:, 0]
    return v1, v2, v3


ARGS = [('tensor', (1,), 'float32'), ('tensor', (1, 1), 'int64'), ('tensor', (4, 4), 'float32', {'special': 0.3}),
        ('tensor', (4, 1), 'int64')]
SEED = 11000124
TOLERANCES = None
CUDA = True
