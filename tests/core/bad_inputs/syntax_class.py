# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    class Box:  # error: class definitions are not supported
        pass
    return x


f(torch.ones(3))
