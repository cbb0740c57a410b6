# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    with bt.device("tpu"):  # error: unknown device 'tpu'; use 'cpu' (or 'llvm') or 'gpu' (or 'cuda')
        y = x + 1
    return y


f(torch.ones(3))
