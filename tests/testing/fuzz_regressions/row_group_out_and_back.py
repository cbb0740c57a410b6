# compile-error on the H200 host (seed 41003452): "Variable v0 was used before its definition" (FuseOps)
# Found by the fuzzer: `v1 = square(v0)`, `concat((v1, v0), axis=0).mean(dim=-2)`: FuseRowwise grouped
# v0, v1 and the mean into one row kernel but not the concat between them (a path out of the group and
# back: the kernel would wait for itself). Fixed: a row group that is not convex is left to FuseOps
# (passes/rowwise.py, partition); also built for sm_90 (CUDA = True).
CUDA = True
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'int16'), x1, x2, x3: bt.Tensor((1000,), 'float32')):
    v0 = ((ceil(x2)) / (abs(sin(x3)) + 1)).exp2()
    v1 = square(v0)
    v2 = x1 or x1
    v3 = (concat((v1, v0), axis=0)).mean(dim=-2)
    return v3, x3


ARGS = [('tensor', (1,), 'int16'), ('tensor', (1, 1000), 'bool'), ('tensor', (1, 1000), 'int8'), ('tensor', (1000,), 'float32')]
SEED = 41003452
TOLERANCES = [(0.049316406251, 0.0), (0.0, 0.0)]
