# cuda-nvcc: the program builds for the CPU; its CUDA, compiled by nvcc: no operator "~" matches these
# operands
# Found at seed 41001720: `~x` of an int64 tensor, vectorised in 16-byte vectors, was printed as `~` of
# CUDA's vector struct (`~*(longlong2*)...`), which has no such operator (nor has int4).
# Fixed: lowering/cuda_spelling.nvcc_spellings writes a vector `~x` as `x ^ -1`, which the code
# generator writes lane by lane.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'int64'), x1, x2):
    return ~x0, ~x1, (~x2) * 3


ARGS = [('tensor', (4, 96), 'int64'), ('tensor', (64, 1024), 'int32'), ('tensor', (16, 1024), 'int16')]
SEED = 41001720
TOLERANCES = None
CUDA = True
