# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x if y else -x  # error: the condition must be a bool tensor


f(torch.ones(3), torch.ones(3))
