# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((3,), "float32")):
    return x + 1


f("1, 2, 3")  # error: expects a tensor (torch, numpy or bt.Tensor), got str
