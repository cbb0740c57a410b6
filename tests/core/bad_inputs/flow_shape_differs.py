# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    if x.sum() > 0:  # error: 'y' has shape (2, 3) on one path of this `if` and (3,) on the other; both paths must give it one shape
        y = x
    else:
        y = x.sum(axis=0)
    return y


f(torch.ones(2, 3))
