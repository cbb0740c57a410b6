# Fixed: a run-time scalar passed into a loop compiled as a recursive function lost its weakness
# (a Python number to torch) there, so `s0 % int64 tensor` was float64 inside and float32 outside.
# compile-error: torch runs the program; babytriton refuses it
# 'v0' is a float64 tensor of shape (11,) on one path of this `if` and a float32 tensor of shape (11,) on the other; both paths must give it one dtype (convert one with .astype())
# babytriton fuzz program, seed 7006021074
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((11,), 'int64'), s0: float):
    v0 = x0
    c = zeros((), 'int64')
    while c < 1:
        v0 = v0 - (s0 % (abs(x1) + 1))
        c = c + 1
    v1a, v1b = (-v0) >= (v0 % (abs(1) + 1)), s0 + s0
    v2 = concat((v0, v0), axis=0)
    v3a, v3b = ((x1.shape[0]) & v1a) ** 2, astype(v2, torch.bfloat16)
    v4 = bt.rsqrt(abs(v3b) + 1)
    return v4


ARGS = [('tensor', (11,), 'float32'), ('tensor', (11,), 'int64'), ('scalar', 'float', 1.75)]
SEED = 7006021074
TOLERANCES = [(0.062500000001, 0.0)]
