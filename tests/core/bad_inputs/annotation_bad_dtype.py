# expect: ValueError
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((3,), "float128")):  # error: unsupported dtype 'float128'; supported: bool, int8
    return x
