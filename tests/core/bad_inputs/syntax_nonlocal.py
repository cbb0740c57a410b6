# expect: CompilationError
import torch
import babytriton as bt


def make():
    scale = 2.0

    @bt.jit
    def f(x):
        nonlocal scale  # error: `nonlocal` statements are not supported
        return x * scale
    return f


make()(torch.ones(3))
