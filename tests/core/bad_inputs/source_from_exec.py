# expect: CompilationError
import torch
import babytriton as bt


namespace = {}
exec("def f(x):\n    return x + 1\n", namespace)
f = bt.jit(namespace["f"])  # error: cannot read the source of 'f'
