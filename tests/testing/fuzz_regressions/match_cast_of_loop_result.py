# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during passes after FuseOps); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: a match_cast of a tuple item (the loop's result) reads its own copy of the item; FuseOps had made the kernel of another reader return its own input
# babytriton fuzz program, seed 7010021221
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor(('d0',), 'float64'), s0, k: bt.constexpr):
    v0 = x1
    c = zeros((), 'int64')
    while c < 1:
        v0 = v0 - (x0.prod(axis=-1))
        c = c + 1
    v1 = x0 <= (x0 - (x0 * v0)) > (v0 @ v0)
    v0 *= astype(x1.prod(axis=-1), 'int8')
    return v0, s0, x0


ARGS = [('tensor', (4,), 'float32'), ('tensor', (4,), 'float64'), ('scalar', 'auto-bool', False), ('constexpr', 2)]
SEED = 7010021221
TOLERANCES = [(1.2717825964282383e-12, 0.0), (0.0, 0.0), (0.0, 0.0)]
