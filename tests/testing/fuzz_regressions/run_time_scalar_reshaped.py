# torch-mismatch: babytriton's result differs from torch's
# result 0: dtype: compiled torch.float64, torch torch.float32
# Found (fuzzer, seed 41001495, H200 host), the dtype half of run_time_scalar_made_a_tensor.py:
# `reshape(s, (1,))` of a run-time float scalar is float32 in torch (torch.as_tensor(s)), an int one
# int64; element-wise ops on the scalar alone still give a Python number.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1: bt.Tensor(('d2',), 'float32'), s0, s1):
    a = maximum(s0, 1.5) - s0
    return reshape(a, (1,)), reshape(s0, (1,)) + x1, reshape(s1, (1,)), a


ARGS = [('tensor', (2,), 'float32'), ('scalar', 'auto-float', 1.75), ('scalar', 'auto-int', 3)]
SEED = 41001495
TOLERANCES = None
