# expect: ValueError
import torch
import babytriton as bt


@bt.jit(backend="cuda")  # error: unknown backend 'cuda'; use one of relax, tir
def f(x):
    return x + 1
