# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x[::-1]  # error: step must be greater than zero


f(torch.ones(3))
