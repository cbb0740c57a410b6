# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return reshape(x, (5,))  # error: reshape() rejected its arguments


f(torch.ones(2, 3))
