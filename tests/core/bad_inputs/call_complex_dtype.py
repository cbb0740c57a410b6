# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 1


f(torch.ones(3, dtype=torch.complex64))  # error: has unsupported dtype torch.complex64
