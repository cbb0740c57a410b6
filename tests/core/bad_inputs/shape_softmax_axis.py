# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return softmax(x, axis=3)  # error: softmax() rejected its arguments


f(torch.ones(2, 3))
