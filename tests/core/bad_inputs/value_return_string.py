# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return "done"  # error: cannot return str 'done' from a @jit function; return tensors, numbers or tuples of them


f(torch.ones(3))
