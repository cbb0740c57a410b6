# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * (2 if x.shape is None else 3)  # error: the comparison `is` is not supported


f(torch.ones(3))
