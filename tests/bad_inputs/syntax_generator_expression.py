# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return sum(v * v for v in (x, x))  # error: generator expressions are not supported


f(torch.ones(3))
