# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    def double(v):  # error: nested function definitions are not supported in @jit functions; define `double` at module level
        return v * 2
    return double(x)


f(torch.ones(3))
