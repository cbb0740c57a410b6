# expect: CompilationError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x: list):  # error: has the annotation list; use bt.Tensor(shape, dtype), int, float, bool or bt.constexpr
    return x
