# expect: ValueError
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor((3, -1), "float32")):  # error: a Tensor shape entry is a non-negative int or a name like 'n', got -1
    return x
