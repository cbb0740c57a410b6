# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(a, b):
    return a @ b  # error: inner sizes 3 and 4 differ


f(torch.ones(2, 3), torch.ones(4, 5))
