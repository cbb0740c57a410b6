# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    if x > 0:  # error: the condition of an `if` must be a single value (a 0-d tensor), got a bool tensor of shape (3,); reduce it first
        x = x + 1
    return x


f(torch.ones(3))
