# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    with bt.device("cpu") as where:  # error: `with bt.device(...)` names no value: drop the `as ...`
        y = x + 1
    return y


f(torch.ones(3))
