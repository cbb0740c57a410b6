# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    if x.sum() > 0:  # error: 'y' is a float32 tensor of shape (3,) on one path of this `if` and an int32 tensor of shape (3,) on the other; both paths must give it one dtype
        y = x * 2
    else:
        y = x.astype("int32")
    return y


f(torch.ones(3))
