# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return sum(x, axes=0)  # error: sum() has no parameter 'axes' (did you mean 'axis'?)


f(torch.ones(3))
