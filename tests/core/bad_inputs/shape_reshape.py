# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return reshape(x, (5,))  # error: reshape(): shape '[5]' is invalid for input of size 6


f(torch.ones(2, 3))
