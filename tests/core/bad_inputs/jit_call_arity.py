# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def scale(x, factor):
    return x * factor


@bt.jit
def f(x):
    return scale(x)  # error: missing a required argument: 'factor'


f(torch.ones(3))
