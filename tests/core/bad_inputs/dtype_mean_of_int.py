# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x.mean(axis=0)  # error: could not infer output dtype: the input must be a float tensor


f(torch.ones(3, 2, dtype=torch.int32))
