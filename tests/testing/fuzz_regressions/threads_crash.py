# thread-crash: a call from one of several threads at once raised
# 8 threads x 25 calls, 1 went wrong; first: thread 4, call 0: RuntimeError: f(): the compiled code stopped with an error (set BABYTRITON_DEBUG=1 to see TVM's message)
# babytriton fuzz program, seed 2026006105
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0: bt.Tensor((1,), 'bool'), x1: bt.Tensor((4, 1), 'float32'), s0: float, k: bt.constexpr):
    v0 = x1
    for i in range(5):
        v0 = maximum(v0, erf(x1))
    if x1.max() > 2.0:
        v1 = k >= (min(s0 * x1, axis=0))
    elif s0 > 1:
        v1 = (x0.astype(torch.float32)) >= 1 < x0
    else:
        v1 = x0 or True
    return v1


ARGS = [('tensor', (1,), 'bool', {'view': 'step'}), ('tensor', (4, 1), 'float32', {'special': 0.2}), ('scalar', 'float', 'nan'), ('constexpr', 1.5)]
SEED = 2026006105
TOLERANCES = None
THREADS = 8
