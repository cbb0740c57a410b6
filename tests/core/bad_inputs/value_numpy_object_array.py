# expect: TypeError
# names: parameter 'x'
import torch
import babytriton as bt


import numpy as np


@bt.jit
def f(x):
    return x + 1


f(np.array(["a", "b"]))  # error: has unsupported dtype <U1; supported:
