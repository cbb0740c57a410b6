# compile-error: torch runs the program; babytriton refuses it
# could not compile `x2.sum(dim=-1)`: the compiler failed on it (during passes after ConvertToDataflow); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: over a static size 0, TVM fills the sum without reading the input, and the float32-accumulating rule for halves (legalize.py) expected a half operand
# babytriton fuzz program, seed 7003021122
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0',), 'float32'), x1, x2: bt.Tensor((0,), 'float16'), x3: bt.Tensor(('d0',), 'int64'), s0: int, s1: bool, k: bt.constexpr):
    v0a, v0b = log(abs((x3 % (abs(x3) + 1)).astype('float16')) + 1), ((x2.sum(dim=-1)) != 3) and (x3 < x1)
    v1a, v1b = mean(bt.softmax(astype(v0b, 'float64'), axis=-1), axis=-1), s0 if (v0b <= 2) else (round(x2))
    return v1b, k


ARGS = [('tensor', (0,), 'float32'), ('tensor', (0,), 'bool', {'view': 'step'}), ('tensor', (0,), 'float16'), ('tensor', (0,), 'int64', {'view': 'step'}), ('scalar', 'int', 1), ('scalar', 'bool', False), ('constexpr', 3)]
SEED = 7003021122
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
