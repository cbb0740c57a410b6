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
    return add_one(x, x, x)  # error: kernel `add_one` has 2 buffers (A, B), got 3 arguments


f(torch.ones(4))
