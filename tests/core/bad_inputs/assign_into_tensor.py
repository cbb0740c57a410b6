# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    x[0] = torch.ones(2)  # error: value tensor of shape (2,) cannot be broadcast to indexing result of shape ()
    return x


f(torch.ones(3))
