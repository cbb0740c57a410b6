# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x: bt.Tensor(("n",), "float32"), y: bt.Tensor(("m",), "float32")):
    return x * y  # error: the sizes n and m meet on one axis here


f(torch.ones(3), torch.ones(3))
