# expect: ValueError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((2, 3), "float32")):
    return x + 1


f(torch.ones(3, 2))  # error: expects shape (2, 3), got (3, 2)
