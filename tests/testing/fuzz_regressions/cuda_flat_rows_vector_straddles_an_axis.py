# cuda-build: babytriton refused the program for the GPU
# could not build kernel `fused_rows_argmin_cast` of 'f' for the GPU (it computes `x0.argmin(axis=None) - x0`)
# [BABYTRITON_DEBUG] Cannot convert type T.int16x14 to CUDA type
# Found (fuzzer, seed 41004969, CUDA run on the H200 host): a reduction over a (10, 14) int16 tensor
# as one flat row of 140: InnerReduction moved its reads through registers a 4-lane vector at a
# time, but a vector of the flat row straddles two rows of the buffer, whose cached (2, 14) block
# was "vectorised" as int16x14. Fixed: a buffer whose last axis the lanes don't tile is read in
# place (schedules/inner_reduction.py _whole_vectors).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0):
    v0 = x0.argmin(axis=None) - x0
    v3a, v3b = v0.split(5, dim=-2)
    return v3b


ARGS = [('tensor', (10, 14), 'int16')]
SEED = 41004969
TOLERANCES = None
CUDA = True
