# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    import math  # error: imports are not supported
    return x * math.pi


f(torch.ones(3))
