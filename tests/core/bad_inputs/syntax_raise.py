# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    raise ValueError("no")  # error: `raise` statements are not supported
    return x


f(torch.ones(3))
