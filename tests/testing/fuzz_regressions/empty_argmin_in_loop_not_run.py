# compile-error: torch runs the program; babytriton refuses it
# argmin(): cannot reduce axis 0 of a tensor of shape (0,): it has size 0, and an empty axis has no argmin (torch raises too)
# Found: argmin of a static (0,) tensor in the body of a loop that runs 0 times (range(-2)) was refused at
# compile time; torch never runs it. Fixed: in code that may not run (a run-time `if`, a recursive loop)
# a static empty axis is checked when it runs (a run-time assert), as a symbolic one already was.
# babytriton fuzz program, seed 8000025603
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((15, 0), 'bool'), x1, s0: int, s1: bool, k: bt.constexpr):
    v0 = clip(x1, -2, 1)
    for i in range(s0):
        v0 = v0 + ((bt.argmin(x1)) - x1)
    return v0, s1, k


ARGS = [('tensor', (15, 0), 'bool'), ('tensor', (0,), 'int16'), ('scalar', 'int', -2), ('scalar', 'bool', False), ('constexpr', 1)]
SEED = 8000025603
TOLERANCES = [(1e-12, 0.0), (0.0, 0.0), (0.0, 0.0)]
