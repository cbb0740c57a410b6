# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    assert x.ndim == 2, f"x must be a matrix, got {x.ndim} axes"  # error: AssertionError: x must be a matrix, got 1 axes
    return x


f(torch.ones(3))
