# compile-error: torch runs the program; babytriton refuses it
# could not compile `v0.sum(dim=-1)`: the compiler failed on it (during passes after ConvertToDataflow); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: over a static size 0, TVM fills the sum without reading the input, and the float32-accumulating rule for halves (legalize.py) expected a half operand
# babytriton fuzz program, seed 7006021124
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, s0, s1: float, k: bt.constexpr):
    v0 = (x0 * x1).astype(torch.bfloat16)
    v1a, v1b = leakyrelu(rms_norm(v0.sum(dim=-1), ones((1,), 'bfloat16')), 0.25), s0 != (k % (abs(x0) + 1))
    return v1b


ARGS = [('tensor', (1, 0), 'int64'), ('tensor', (0,), 'int16'), ('scalar', 'auto-float', 0.25), ('scalar', 'float', -1.5), ('constexpr', 1.5)]
SEED = 7006021124
TOLERANCES = [(0.0, 0.0)]
