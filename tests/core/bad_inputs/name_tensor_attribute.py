# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x.expand_dims(0)  # error: tensors have no attribute 'expand_dims' here; call the operator instead: expand_dims(x)


f(torch.ones(3))
