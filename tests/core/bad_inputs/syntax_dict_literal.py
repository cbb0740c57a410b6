# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    table = {"x": x}  # error: dict literals are not supported
    return x


f(torch.ones(3))
