# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    pair = (x, x)
    return maximum(*pair[0])  # error: `*` in a call expands a tuple or list known at compile time


f(torch.ones(3))
