# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    sizes = {n for n in x.shape}  # error: set comprehensions are not supported
    return x


f(torch.ones(3))
