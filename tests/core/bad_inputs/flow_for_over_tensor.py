# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    total = 0
    for v in x:  # error: iterating over a tensor is not supported in @jit functions; loop over indices instead
        total = total + v
    return total


f(torch.ones(3))
