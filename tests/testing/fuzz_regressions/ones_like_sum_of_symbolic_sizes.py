# compile-error: torch runs the program; babytriton refuses it
# could not build kernel `fused_rows_ones_sum_greater` of 'f' for the CPU (it computes `ones_like(x1).sum() > -2`): the compiler failed on it (during passes after FuseTIR); set BABYTRITON_DEBUG=1 to see the cause
# Found (fuzzer, CI batch seed 8): the row kernel of `ones_like(x1).sum() > -2` with x1 of symbolic size
# (d1, d2) reads no buffer of those sizes (only the call of `ones_like` names them, as tir_vars), so its
# kernel used d1 undeclared ("undefined variable d1"); FuseRowwise had then been made to leave it apart.
# Fixed: a fused group's function takes the sizes none of its tensors defines as a Shape parameter
# (rowwise.with_free_sizes, FuseMultiOutput too): the kernel receives them as scalars.
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
