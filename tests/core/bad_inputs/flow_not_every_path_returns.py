# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    if x.sum() > 0:  # error: not every path returns a value: after this `if` (decided at run time), the `if` branch reaches the end of the function without `return`
        return x


f(torch.ones(3))
