# expect: CompilationError
import torch
import babytriton as bt


f = bt.jit(len)  # error: @jit takes a Python function
