# expect: CompilationError
import torch
from tvm.script import tirx as T

import babytriton as bt


@T.prim_func
def add_one(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] + T.float32(1)


@T.prim_func
def peek(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"), C: T.Buffer((4,), "float32")):
    for i in range(4):
        C[i] = A[i]


@bt.jit
def f(x):
    return peek(x)  # error: kernel `peek`'s buffer 'B' would be an output, but the kernel never writes it


f(torch.ones(4))
