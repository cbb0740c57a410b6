# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during passes after ConvertToDataflow); set BABYTRITON_DEBUG=1 to see the cause
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor((0,), 'bfloat16')):
    v0a = layer_norm(x0, ones((0,), 'bfloat16'), zeros((0,), 'bfloat16'), -1)
    v2 = 3
    return v2
ARGS = [('tensor', (0,), 'bfloat16')]
SEED = 2026006109
TOLERANCES = None
