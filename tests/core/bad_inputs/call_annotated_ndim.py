# expect: ValueError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor(("n", 3), "float32")):
    return x + 1


f(torch.ones(3))  # error: expects a 2-d tensor of shape (n, 3), got 1-d shape (3,)
