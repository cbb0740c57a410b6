# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x // 0  # error: by zero


f(torch.arange(3, dtype=torch.int32))
