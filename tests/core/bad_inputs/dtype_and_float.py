# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x and y  # error: `and` needs bool tensors


f(torch.ones(3), torch.ones(3))
