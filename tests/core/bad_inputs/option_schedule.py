# expect: ValueError
import torch
import babytriton as bt


@bt.jit(schedule="fastest")  # error: unknown schedule 'fastest'; use one of dlight, fallback, meta_schedule
def f(x):
    return x + 1
