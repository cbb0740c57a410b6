# expect: CompilationError
import torch
import babytriton as bt


counter = 0


@bt.jit
def f(x):
    global counter  # error: `global` statements are not supported
    return x


f(torch.ones(3))
