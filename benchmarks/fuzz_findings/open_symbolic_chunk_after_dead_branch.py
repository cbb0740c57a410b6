# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'float64'), x1, x2: bt.Tensor((1, 'd1'), 'int32')):
    v2a, v2b = torch.fmin(x0, x1).chunk(2, dim=1)
    if x2.max() > 3:
        v3 = v2b
    else:
        v3 = v2a
    v4a, v4b = torch.chunk(v2a, 2, -2)
    v4 = v4a + v4b
    return v4
ARGS = [('tensor', (3, 4), 'float64'), ('tensor', (3, 4), 'float32'), ('tensor', (1, 4), 'int32')]
SEED = 37000205
TOLERANCES = None
