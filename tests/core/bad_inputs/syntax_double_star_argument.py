# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return sum(x, **{"axis": 0})  # error: `**kwargs` in calls is not supported


f(torch.ones(3))
