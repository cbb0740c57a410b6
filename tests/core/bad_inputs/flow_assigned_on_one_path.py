# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    if x.sum() > 0:
        y = x * 2
    return y  # error: 'y' is not defined on every path to here: the `if` on line 8 is decided at run time and assigns 'y' only in its `if` branch


f(torch.ones(3))
