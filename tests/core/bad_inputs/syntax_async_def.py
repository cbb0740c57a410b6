# expect: CompilationError
import torch
import babytriton as bt


@bt.jit
async def f(x):  # error: cannot compile an `async def` function
    return x
