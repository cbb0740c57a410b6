# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# babytriton fuzz program, seed 7000021016
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0: bt.Tensor((4, 1), 'bfloat16'), x1, x2):
    v0 = (permute_dims(x0)) @ x0
    v1a, v1b = x0 // (abs(x2) + 1), 2.0 - 0.75
    v2a, v2b = max_sub(v1b, 0.5), maximum(v0, (-1) * (v0 if (x0 == x0) else x0))
    v3 = (v2a <= (argmin(x0 if (v1b >= x2) else v2a, axis=-2)) <= (-1)) or ((flatten(v2a)) != (3 - x1))
    return v3, x2


ARGS = [('tensor', (4, 1), 'bfloat16'), ('tensor', (2,), 'int64'), ('tensor', (2, 1, 2), 'float32', {'special': 0.05})]
SEED = 7000021016
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
