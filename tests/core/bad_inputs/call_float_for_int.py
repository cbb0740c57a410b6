# expect: TypeError
# names: parameter 'n'
import torch
import babytriton as bt


@bt.jit
def f(x, n: int):
    return x * n


f(torch.ones(3), 2.5)  # error: is annotated int, got float 2.5
