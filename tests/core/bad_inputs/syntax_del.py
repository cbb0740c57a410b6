# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    y = x + 1
    del y  # error: `del` statements are not supported
    return x


f(torch.ones(3))
