# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return torch.sigmoid(x)  # error: did you mean the operator 'sigmoid'?


f(torch.ones(3))
