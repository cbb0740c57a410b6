# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 1


f([1.0, 2.0, 3.0])  # error: expects a tensor (torch, numpy or bt.Tensor) or a number, got list
