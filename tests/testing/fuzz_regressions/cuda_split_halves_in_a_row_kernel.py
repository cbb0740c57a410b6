# cuda-build: the program builds and runs on the CPU; building it for CUDA (sm_90) failed
# Found by the performance fuzzer (benchmarks/perf_fuzz.py, seed 0, p161): the two halves of a split
# (`a * erf(g)`) read inside a softmax's row kernel were cached as one "vector" spanning both halves
# ("Cannot convert type T.int32x4100 to CUDA"). RowKernel and InnerReduction now cache a read as a
# vector only where it spans one vector of the step's lanes (_one_vector).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x, mask):
    h = torch.tanh(x) * 2.0 - x * 0.1
    a, g = h.split(4096, dim=2)
    h = a * torch.erf(g)
    h = h.masked_fill(mask, float('-inf'))
    m = h.amax(-1, keepdim=True)
    e = torch.exp(h - m)
    return e / e.sum(-1, keepdim=True)


ARGS = [('tensor', (2, 4, 8192), 'float32'), ('tensor', (2, 4, 4096), 'bool')]
SEED = 161
TOLERANCES = [(1e-5, 1e-5)]
CUDA = True
