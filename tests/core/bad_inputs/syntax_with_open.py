# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    with open("log.txt") as log:  # error: only `with bt.device(...)` blocks are supported
        pass
    return x


f(torch.ones(3))
