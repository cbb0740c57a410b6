# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    yield x + 1  # error: `yield` expressions are not supported


f(torch.ones(3))
