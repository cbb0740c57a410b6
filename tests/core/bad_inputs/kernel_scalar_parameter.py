# expect: CompilationError
import torch
from tvm.script import tirx as T

import babytriton as bt


@T.prim_func
def add_one(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] + T.float32(1)


@T.prim_func
def scale(A: T.Buffer((4,), "float32"), s: T.float32, B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] * s


@bt.jit
def f(x):
    return scale(x)  # error: kernel `scale` has the scalar parameter 's'


f(torch.ones(4))
