# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    x[0] = 1.0  # error: assigning into part of a tensor is not supported
    return x


f(torch.ones(3))
