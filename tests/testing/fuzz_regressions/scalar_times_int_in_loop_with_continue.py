# Fixed: `s0 * (int64 tensor)` inside a recursive loop computed in float64 (s0 came in as a plain
# argument, no longer a Python number), so the `continue` path and the other disagreed.
# compile-error: torch runs the program; babytriton refuses it
# 'v0' is a float32 tensor of shape (1, 2, 2) on one path of this `if` and a float64 tensor of shape (1, 2, 2) on the other; both paths must give it one dtype (convert one with .astype())
# babytriton fuzz program, seed 7012021226
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 2, 2), 'float32'), s0):
    v0 = x0 + x0
    for i in range(24):
        if i == 20:
            continue
        v0 = v0 - (s0 * (argmax(x0, axis=-1)))
    v1a, v1b = astype(v0 * v0, torch.float32), v0 == v0
    v2 = x0
    c = zeros((), 'int64')
    while c < 3:
        v2 = v2 - (relu(v1a))
        c = c + 1
    v3 = rsqrt(abs(tril(v1a, 1)) + 1)
    return v3, v0, s0


ARGS = [('tensor', (1, 2, 2), 'float32', {'special': 0.05}), ('scalar', 'auto-float', '-inf')]
SEED = 7012021226
TOLERANCES = [(9.5367531640625e-07, 0.0), (0.0, 0.0), (0.0, 0.0)]
