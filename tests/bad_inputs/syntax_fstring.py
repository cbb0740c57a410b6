# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    label = f"shape {x.shape}"  # error: f-strings are not supported
    return x


f(torch.ones(3))
