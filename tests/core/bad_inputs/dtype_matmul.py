# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
def f(a, b):
    return a @ b  # error: `@` needs operands of one dtype, got float32 and float16


f(torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float16))
