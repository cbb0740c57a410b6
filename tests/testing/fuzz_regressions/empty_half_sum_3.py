# compile-error: torch runs the program; babytriton refuses it
# could not compile `x1.sum()`: the compiler failed on it (during passes after ConvertToDataflow); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: over a static size 0, TVM fills the sum without reading the input, and the float32-accumulating rule for halves (legalize.py) expected a half operand
# babytriton fuzz program, seed 7009021087
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'int16'), x1, x2: bt.Tensor(('d0', 'd1'), 'float32')):
    v0 = x0 - (x0 if (x0 >= (2.0 % (abs(x0) + 1))) else x1)
    v1a, v1b = (permute_dims(x2)) @ x2, x1.sum()
    v2a, v2b = erf(v0), -v1b
    v3 = x2 * (astype(x1, 'float64'))
    v4 = abs(add(v0 - v1b, v2a))
    return v4


ARGS = [('tensor', (0, 3), 'int16'), ('tensor', (0, 3), 'bfloat16'), ('tensor', (0, 3), 'float32')]
SEED = 7009021087
TOLERANCES = [(0.406250000001, 0.0)]
