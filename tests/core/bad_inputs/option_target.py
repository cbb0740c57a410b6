# expect: ValueError
import torch
import babytriton as bt


@bt.jit(target="tpu")  # error: unknown target 'tpu'; use 'cpu' (or 'llvm'), 'gpu' (or 'cuda')
def f(x):
    return x + 1
