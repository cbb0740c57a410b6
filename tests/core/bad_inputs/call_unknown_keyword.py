# expect: TypeError
# names: 'z'
import torch
import babytriton as bt


@bt.jit
def f(x, y):
    return x + y


f(torch.ones(3), z=torch.ones(3))  # error: got an unexpected keyword argument 'z'
