# expect: CompilationError
import torch
import babytriton as bt


@bt.jit(backend="tir")
def f(x, out):
    for i in bt.parallel(x.shape[0]):
        out[i] = x[i] * 2
    return out  # error: writes its results into its parameters (destination passing); it cannot return a value


f(torch.ones(3), torch.empty(3))
