# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x.exp()  # error: tensors have no attribute 'exp' here; call the operator instead: exp(x)


f(torch.ones(3))
