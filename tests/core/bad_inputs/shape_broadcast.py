# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x + y  # error: shapes (3,) and (4,) cannot be broadcast together for `+`


f(torch.ones(3), torch.ones(4))
