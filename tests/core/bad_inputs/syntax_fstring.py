# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    label = f"values {x}"  # error: an f-string in @jit code formats compile-time values only
    return x


f(torch.ones(3))
