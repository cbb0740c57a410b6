# expect: TypeError
# names: 'y'
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x + y


f(torch.ones(3))  # error: missing a required argument: 'y'
