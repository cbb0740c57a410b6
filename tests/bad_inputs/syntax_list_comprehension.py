# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    parts = [x * i for i in (1, 2)]  # error: list comprehensions are not supported
    return parts


f(torch.ones(3))
