# cuda-build: babytriton refused the program for the GPU
# could not build kernel `fused_rows_variance_cast` of 'f' for the GPU (it computes `variance(x1, dim=(0, 1))`)
# [BABYTRITON_DEBUG] Check failed: lanes % 2 == 0 (1 vs. 0) : only support even lane for bfloat16 type
# Found (fuzzer, seed 41005017, CUDA run on the H200 host): the variance of a (4, 3) bfloat16 tensor
# as one flat row of 12: a 4-lane vector of the flat row straddles rows of the buffer, and its
# cached block became a bfloat16x3 vector. Same cause and fix as
# cuda_flat_rows_vector_straddles_an_axis.py (schedules/inner_reduction.py _whole_vectors).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1):
    return variance(x1, dim=(0, 1)) * x1


ARGS = [('tensor', (4, 3), 'bfloat16')]
SEED = 41005017
TOLERANCES = None
CUDA = True
