# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((2, 3), "float32")):
    return x + 1


f(torch.ones(2, 3, dtype=torch.float64))  # error: expects dtype float32, got float64
