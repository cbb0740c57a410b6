# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, n: int):
    return x * len(n)  # error: len() of int 4 is undefined


f(torch.ones(3), 4)
