# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x * int(x.sum())  # error: int() works on compile-time numbers only, got a float32 tensor of shape (); convert a tensor with .astype('int64')


f(torch.ones(3))
