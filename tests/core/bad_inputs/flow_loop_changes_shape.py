# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor(("n",), "float32")):
    for i in range(x.shape[0]):  # error: 'x' changes shape from (n,) to (2, n) from one iteration to the next of the loop on line 8
        x = stack((x, x))
    return x


f(torch.ones(3))
