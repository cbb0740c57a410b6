# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    named = {str(i): x for i in (1, 2)}  # error: dict comprehensions are not supported
    return x


f(torch.ones(3))
