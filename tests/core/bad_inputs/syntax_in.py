# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * (2 if x in (1, 2) else 3)  # error: `in` with a tensor on its left is not supported


f(torch.ones(3))
