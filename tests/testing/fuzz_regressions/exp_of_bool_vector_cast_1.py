# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: the CPU exp polynomial names its argument in a Let; a bool vector's cast in it is now a select (TVM's interval analysis failed on it)
# babytriton fuzz program, seed 7000021131
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, x2, x3, s0: bool, k: bt.constexpr):
    v0a, v0b = (min(x0, dim=-2, keepdims=True)).sum(axis=-1), (s0 == (x2 % (abs(sum(x2, axis=-1)) + 1))) and ((x0.shape[2]) < (x0 & s0))
    v1 = x2 == x3
    v2 = x2 * (astype(x3, 'int16'))
    v3a, v3b = log_softmax((x3 >= x1).astype('float32'), axis=0), tanh(2 / (abs(v1.astype('int16')) + 1))
    return v3b, v0a, v3a


ARGS = [('tensor', (1, 2, 4), 'int8'), ('tensor', (), 'int16'), ('tensor', (4,), 'float32', {'view': 'step'}), ('tensor', (2, 4), 'float32'), ('scalar', 'bool', False), ('constexpr', 2)]
SEED = 7000021131
TOLERANCES = [(1.9073496328125e-06, 0.0), (0.0, 0.0), (9.688266879974052e-06, 0.0)]
