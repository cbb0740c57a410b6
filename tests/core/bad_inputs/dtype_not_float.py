# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return not x  # error: `not` needs a bool tensor


f(torch.ones(3))
