# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    rows, cols = x.shape  # error: cannot unpack 3 values into 2 names
    return x


f(torch.ones(2, 3, 4))
