# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    for i in range(2.5):  # error: range() needs integers, got float 2.5
        x = x + i
    return x


f(torch.ones(3))
