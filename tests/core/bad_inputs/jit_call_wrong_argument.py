# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def scale(x: bt.Tensor((3,), "float32"), factor: float):
    return x * factor


@bt.jit
def f(x):
    return scale(x, x)  # error: scale(): parameter 'factor' is annotated float, got a float32 tensor of shape (3,)


f(torch.ones(3))
