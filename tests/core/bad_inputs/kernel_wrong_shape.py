# expect: CompilationError
import torch
from tvm.script import tirx as T

import babytriton as bt


@T.prim_func
def add_one(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] + T.float32(1)


@bt.jit
def f(x):
    return add_one(x)  # error: kernel `add_one`'s buffer 'A' is float32 (4,), but argument 1 has size 5 on axis 0


f(torch.ones(5))
