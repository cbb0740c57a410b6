# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    match x.ndim:  # error: `match` statements are not supported
        case 1:
            return x
    return x


f(torch.ones(3))
