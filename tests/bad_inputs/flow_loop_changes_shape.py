# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x, n: int):
    for i in range(n):  # error: 'x' changes shape from (3,) to (2, 3) from one iteration to the next of the loop on line 8
        x = stack((x, x))
    return x


f(torch.ones(3), 2)
