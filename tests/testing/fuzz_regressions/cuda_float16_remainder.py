# cuda-build: the program builds for the CPU, but not for CUDA (sm_90)
# could not build kernel `mod` of 'f' for the GPU: "Non single or double precision floating point in Mod"
# Found (while fixing seed 100000422): a float16 `%` / fmod (by 0.0 too) on CUDA: TVM's CUDA code
# generator has no half fmod. Fixed: on CUDA a half fmod is computed in float32 (exact for halves) and
# rounded back, as half division is (schedules.passes.half_math_in_float32).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1):
    return torch.fmod(x0, x1), x0 % x1, torch.remainder(x0, 1.5), torch.fmod(x0, 0.0)


ARGS = [('tensor', (3, 8), 'float16'), ('tensor', (8,), 'float16')]
SEED = 0
TOLERANCES = None
CUDA = True
