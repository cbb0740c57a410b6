# expect: ValueError
# names: parameter 'y'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((3, 2), "float32"), y: bt.Tensor(("d",), "float32")):
    return x * y


f(torch.ones(3, 2), torch.ones(3))  # error: size 'd' of parameter 'y' is 3, but line 9 of call_symbolic_size_meets_static.py combines it element-wise with a size of 2
