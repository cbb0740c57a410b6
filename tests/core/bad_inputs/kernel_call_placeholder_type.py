# expect: CompilationError
import torch
from tvm.script import tirx as T

import babytriton as bt


@T.prim_func
def copy(a: T.handle, b: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (m,), "float32")
    for i in range(m):
        B[i] = A[0]


@bt.jit
def f(x):
    return copy(x)  # error: cannot infer the size 'm' of kernel `copy`'s output 'B' from its inputs; pass a placeholder for it


f(torch.ones(4))
