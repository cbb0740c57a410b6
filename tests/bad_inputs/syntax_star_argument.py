# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    pair = (x, x)
    return maximum(*pair)  # error: star-expressions (*args) are not supported


f(torch.ones(3))
