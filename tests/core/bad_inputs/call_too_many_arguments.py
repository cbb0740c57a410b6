# expect: TypeError
# names: f(x)
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 1


f(torch.ones(3), torch.ones(3))  # error: too many positional arguments
