# expect: CompilationError
import torch
import babytriton as bt


def double(v):
    return v * 2


@bt.jit
def f(x):
    return double(x)  # error: decorate it with @bt.jit to call it here


f(torch.ones(3))
