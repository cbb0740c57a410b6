# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return torch.nonzero(x)  # error: torch.nonzero is not supported in @jit code (babytriton's torch table has no rule for it); did you mean the operator 'nonzero'?


f(torch.ones(3))
