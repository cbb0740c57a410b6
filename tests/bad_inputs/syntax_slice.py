# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x[1:]  # error: indexing or slicing tensors is not supported in the Relax backend; element access works in @bt.jit(backend='tir') functions


f(torch.ones(3))
