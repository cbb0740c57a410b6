# expect: ValueError
import torch
import babytriton as bt


@bt.jit(unroll=-1)  # error: unroll is a non-negative int, got -1
def f(x):
    return x + 1
