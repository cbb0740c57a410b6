# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 2**64  # error: too big


f(torch.arange(3, dtype=torch.int32))
