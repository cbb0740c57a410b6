# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return sum(v * v for v in x)  # error: a comprehension goes over a tuple or list known when compiling


f(torch.ones(3))
