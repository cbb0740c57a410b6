# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x.mean(axis=0)  # error: mean() needs float tensors


f(torch.ones(3, 2, dtype=torch.int32))
