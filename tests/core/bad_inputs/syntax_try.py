# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    try:  # error: try/except blocks are not supported
        y = x + 1
    except ValueError:
        y = x
    return y


f(torch.ones(3))
