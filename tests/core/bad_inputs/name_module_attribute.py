# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return bt.sigmod(x)  # error: `bt` has no attribute 'sigmod'; did you mean 'sigmoid'?


f(torch.ones(3))
