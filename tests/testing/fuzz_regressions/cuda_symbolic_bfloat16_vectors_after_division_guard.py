# cuda-build: the program builds and runs on the CPU; building it for CUDA (sm_90) failed
# Found at seed 48002758 (minimised): `exp` of a (d0, d1) bfloat16 tensor. The guard that makes index
# arithmetic divide by max(size, 1) (lowering/divisors.py, against a hoisted division by an empty axis's
# size on the CPU) kept TVM from proving the GPU kernel's bfloat16 vectors whole, and its CUDA code
# generator failed on their type ("Check failed: !type_name.empty()").
# Fixed: the guard is for CPU kernels only (a GPU's integer division by zero does not trap).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'bfloat16')):
    return exp(x0), exp(x0 * 1.5).sum(axis=-1)


ARGS = [('tensor', (64, 257), 'bfloat16')]
SEED = 48002758
TOLERANCES = [(0.02, 0.02), (0.5, 0.02)]
CUDA = True
