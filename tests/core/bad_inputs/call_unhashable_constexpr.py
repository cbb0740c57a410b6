# expect: TypeError
# names: parameter 'k'
import torch
import babytriton as bt


@bt.jit
def f(x, k: bt.constexpr):
    return x * k


f(torch.ones(3), [1, 2])  # error: is bt.constexpr, so its value must be hashable; got list
