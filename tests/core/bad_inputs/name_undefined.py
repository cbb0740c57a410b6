# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + bias  # error: name 'bias' is not defined; assign it before this line, pass it as a parameter, or define it at module level


f(torch.ones(3))
