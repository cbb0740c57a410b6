# expect: CompilationError
# names: options
import torch
import babytriton as bt


@bt.jit
def f(x, **options):  # error: **options parameters are not supported
    return x
