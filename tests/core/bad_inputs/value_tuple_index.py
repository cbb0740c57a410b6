# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * x.shape[5]  # error: index 5 is out of range for a tuple of 2 values


f(torch.ones(2, 3))
