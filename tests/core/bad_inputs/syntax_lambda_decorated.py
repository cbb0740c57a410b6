# expect: CompilationError
import torch
import babytriton as bt


f = bt.jit(lambda x: x + 1)  # error: @jit cannot compile a lambda
