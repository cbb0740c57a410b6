# expect: TypeError
# names: parameter 'n'
import torch
import babytriton as bt


@bt.jit
def f(x, n: int):
    return x * n


f(torch.ones(3), True)  # error: is annotated int, got bool True
