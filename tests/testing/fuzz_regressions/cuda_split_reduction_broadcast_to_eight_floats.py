# cuda-nvcc: the program builds for the CPU; its CUDA, compiled by nvcc: too many arguments in function call
# Found at seed 48000299: `(x * 0.5).sum()` of 30000 halves. SplitReduction loaded 8 halves a thread
# and kept 8 float32 partial sums; TVM spelled the constant 0.5 broadcast to those 8 lanes as
# make_ulonglong4 of 8 floats.
# Fixed: schedules/split_reduction._lanes keeps 4 lanes where the update broadcasts a value (a
# constant, a load not along the reduced axes) and more would be wider than 16 bytes.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x: bt.Tensor((30000,), 'float16'), s: bt.Tensor((1,), 'float16')):
    return (x * 0.5).sum(axis=-1), (x * s).sum(axis=-1)


ARGS = [('tensor', (30000,), 'float16', {'positive': True}), ('tensor', (1,), 'float16', {'positive': True})]
SEED = 48000299
TOLERANCES = [(0.0, 0.00048828125), (0.0, 0.00048828125)]
CUDA = True
