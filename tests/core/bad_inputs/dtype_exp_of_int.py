# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return exp(x)  # error: exp() rejected its arguments


f(torch.ones(3, dtype=torch.int32))
