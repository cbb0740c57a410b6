# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 1


f(torch.ones(3, device="meta"))  # error: is on meta, but this function runs on the CPU
