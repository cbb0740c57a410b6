# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * (2 if 3 in x.shape else 3)  # error: the comparison `in` is not supported


f(torch.ones(3))
