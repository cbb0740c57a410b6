# expect: ValueError
import torch
import babytriton as bt


@bt.jit(backend="tir")
def f(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 2


buffer = torch.ones(3)
f(buffer, buffer)  # error: parameter 'out' is written by the function and shares memory with parameter 'x'; pass separate tensors
