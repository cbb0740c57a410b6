# expect: CompilationError
import torch
import babytriton as bt


double = lambda v: v * 2  # noqa: E731 - a lambda has no `def` to inline


@bt.jit
def f(x):
    return double(x)  # error: cannot call the lambda `double` from a @jit function


f(torch.ones(3))
