# Found by the fuzzer (seed 8000024091): `squeeze` of a Python number; the oracle called .squeeze() on
# an int and raised, babytriton gave the 0-d tensor. A shape op takes a number as torch.as_tensor
# makes it, in both now (oracle._on_tensor).
# babytriton fuzz program, seed 8000024091
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def select(a, b):
    return where(a > b, a, b)


@bt.jit(cache=False)
def f(x0: bt.Tensor((), 'float64'), s0: float, s1):
    v0 = not (((max_sub(x0, 2)) == s1) or (s1 <= x0))
    if (-2) > 2:
        v1 = bt.abs(select((-1), s1))
    else:
        v1 = s1 * s1
    v2 = (squeeze(v1)) - (-x0)
    v3 = sum(isfinite((flatten(v0)).argmin(axis=0, keepdims=True)), keepdims=True)
    return v3, x0


ARGS = [('tensor', (), 'float64', {'special': 0.2}), ('scalar', 'float', '-inf'), ('scalar', 'auto-int', 1)]
SEED = 8000024091
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
