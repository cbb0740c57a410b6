# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    print(x)  # error: print() cannot be called from @jit code: compiled code does not run Python; to watch values, run the function eagerly: f.eager(...)
    return x


f(torch.ones(3))
