# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return (y := x + 1) * y  # error: assignment expressions (`:=`) are not supported


f(torch.ones(3))
