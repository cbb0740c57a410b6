# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    g = lambda v: v * 2  # error: lambda expressions are not supported
    return g(x)


f(torch.ones(3))
