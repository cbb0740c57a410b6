# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


@bt.jit
def f(x):
    return x + 1


f.compile()  # error: is not fully annotated (no annotation); pass example arguments to compile()
