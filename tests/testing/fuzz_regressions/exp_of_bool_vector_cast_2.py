# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Fixed: the CPU exp polynomial names its argument in a Let; a bool vector's cast in it is now a select (TVM's interval analysis failed on it)
# babytriton fuzz program, seed 7002021081
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((4, 4), 'float32'), s0: int):
    v0a, v0b = x1 ** 3, bt.log_softmax(((x1 != s0) and (s0 != x0)).astype('float32'), axis=-2)
    v1 = bt.exp(((x0 < x0) or False).astype('float32'))
    return v1


ARGS = [('tensor', (4, 1), 'float32', {'special': 0.2}), ('tensor', (4, 4), 'float32', {'special': 0.2}), ('scalar', 'int', -1)]
SEED = 7002021081
TOLERANCES = [(2.592356564555211e-06, 0.0)]
