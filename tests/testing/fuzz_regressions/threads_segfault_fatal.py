# fatal: the process died (a signal such as SIGSEGV) while checking the program
# the process died (SIGSEGV) checking this program with 8 threads
# babytriton fuzz program, seed 2026006100
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((1, 2), 'float16'), x2: bt.Tensor((4, 1, 1), 'bool'), s0: int):
    v0 = (astype(x2, 'int16')) + (exp(x0))
    v0 += floor(x0)
    v2a, v2b = rsqrt(abs(v0) + 1), (-1.5) + (mean(bt.sqrt(abs(v0) + 1), axis=(0, 1)))
    return v2b


ARGS = [('tensor', (2,), 'float32'), ('tensor', (1, 2), 'float16'), ('tensor', (4, 1, 1), 'bool'), ('scalar', 'int', -3)]
SEED = 2026006100
TOLERANCES = [(4.853935438429848e-05, 0.0)]
THREADS = 8
