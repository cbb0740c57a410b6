# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Found: as bool_intermediate_vectorised_1 (the compares beside an argmax): "and <4 x i8>, <4 x i1>".
# Fixed: bool intermediate buffers of CPU kernels are stored as int8 (schedules.bool_buffers_as_bytes).
# babytriton fuzz program, seed 8000025434
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def mul_add(a, b):
    return a * b + a


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 1), 'int16'), x1: bt.Tensor((1, 4), 'float32'), x2, x3: bt.Tensor((4, 1), 'int8'), s0: float, k: bt.constexpr):
    v0a, v0b = (s0 + x3) if (x0 != ((x0 - (x1.shape[0])) > x1) < 1) else (((x3 ** 1) > x1) or True), bt.maximum(0.75, bt.silu(astype((x3 < x2 > x2) and (x1 <= k), 'float32')))
    v1 = minimum(-x3, v0a)
    v2a, v2b = -(max_sub(k, s0)), log(abs(v0b / (abs(bt.argmax(v1, axis=0)) + 1)) + 1)
    return v2b


ARGS = [('tensor', (4, 1), 'int16', {'view': 'T'}), ('tensor', (1, 4), 'float32'), ('tensor', (4,), 'bool'), ('tensor', (4, 1), 'int8'), ('scalar', 'float', 2.0), ('constexpr', 1)]
SEED = 8000025434
TOLERANCES = [(6.292928063625441e-06, 0.0)]
