# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    with bt.device("cpu"):
        with bt.device("cpu"):  # error: device blocks cannot be nested: this one is inside `with bt.device('cpu')` on line 8
            y = x + 1
    return y


f(torch.ones(3))
