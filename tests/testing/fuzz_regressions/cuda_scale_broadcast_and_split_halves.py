# cuda-build: the program builds and runs on the CPU; building it for CUDA (sm_90) failed
# Found (issue 28, users' programs): `erf(x) * s`, `round(x / s)`, `x * rsqrt(s)` with s broadcast along the
# last axis ("VectorizeLoop before LiftStorageAlloc"), and `h * erf(g)` of the two halves of a split along
# the last axis ("Cannot convert type T.int32x4104 to CUDA type"), both reported at the `def` line.
# Fixed in GPU Elementwise (schedules/elementwise.py); kept here as a program the fuzzer checks both ways.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x, s, y):
    a = torch.erf(x) * s
    b = torch.round(x / s)
    c = x * torch.rsqrt(s)
    h, g = torch.chunk(y, 2, -1)
    d = h * torch.erf(g)
    return a, b, c, d


ARGS = [('tensor', (64, 1024), 'float16', {'special': 0.01}), ('tensor', (64, 1), 'float16', {'positive': True}),
        ('tensor', (16, 8208), 'float32')]
SEED = 28
TOLERANCES = [(1e-2, 1e-2), (1.0, 0.0), (1e-2, 1e-2), (1e-5, 1e-5)]
CUDA = True
