# expect: CompilationError
# names: xs
import torch
import babytriton as bt


@bt.jit
def f(*xs):  # error: *xs / **xs parameters are not supported
    return xs
