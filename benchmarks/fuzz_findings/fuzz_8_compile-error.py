# compile-error: torch runs the program; babytriton refuses it
# could not build kernel `fused_rows_ones_sum_greater` of 'f' for the CPU (it computes `ones_like(x1).sum() > -2`): the compiler failed on it (during passes after FuseTIR); set BABYTRITON_DEBUG=1 to see the cause
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 1), 'float32'), x1: bt.Tensor(('d1', 'd2'), 'float32'), x2):
    v0 = x0 <= x2
    if ones_like(x1).sum() > -2:
        v1 = x1
    else:
        v1 = x1.acosh()
    v2 = x1 if v0 else v1
    return x1
ARGS = [('tensor', (1, 1), 'float32'), ('tensor', (0, 2), 'float32'), ('tensor', (2,), 'bfloat16')]
SEED = 8
TOLERANCES = None
