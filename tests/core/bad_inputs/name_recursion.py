# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return f(x - 1)  # error: recursive call (f -> f)


f(torch.ones(3))
