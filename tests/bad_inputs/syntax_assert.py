# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    assert x.ndim == 1  # error: `assert` statements are not supported
    return x


f(torch.ones(3))
