# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * (2 if x.dtype is torch.float32 else 3)  # error: `is` does not compare dtypes in @jit code


f(torch.ones(3))
