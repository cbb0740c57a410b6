# expect: TypeError
import torch
import babytriton as bt


@bt.jit(targte="cpu")  # error: jit() got an unknown option 'targte'; did you mean 'target'?
def f(x):
    return x + 1
