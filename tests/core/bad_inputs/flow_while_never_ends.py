# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    while True:  # error: this `while` loop never ends: its condition is always true here and its body has no `break`
        x = x + 1
    return x


f(torch.ones(3))
