# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    parts = [x * i for i in (1, 2) if x.sum() > i]  # error: a comprehension's `if` must be known when compiling
    return parts


f(torch.ones(3))
