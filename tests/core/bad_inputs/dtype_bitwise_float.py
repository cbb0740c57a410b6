# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x & y  # error: `&` needs bool or integer operands


f(torch.ones(3), torch.ones(3))
