# expect: ValueError
# names: parameter 'y'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor(("n",), "float32"), y: bt.Tensor(("n",), "float32")):
    return x + y


f(torch.ones(3), torch.ones(4))  # error: dimension 'n' is 3 in parameter 'x' but 4 in parameter 'y'
