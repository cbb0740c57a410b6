# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * (1 // 0)  # error: division by zero in a compile-time expression


f(torch.ones(3))
