# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return sigmod(x)  # error: name 'sigmod' is not defined; did you mean 'sigmoid'?


f(torch.ones(3))
