# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return -(x > 0)  # error: `-` on a bool tensor is not supported


f(torch.ones(3))
