# expect: CompilationError
import torch
import babytriton as bt


@bt.jit(backend="tir")
def f(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i, 0]  # error: 'x' has 1 dimension(s); index each of them (got 2 index(es))


f(torch.ones(3), torch.empty(3))
