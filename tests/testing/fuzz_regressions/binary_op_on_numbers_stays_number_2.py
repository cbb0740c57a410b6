# Found by the fuzzer (seed 8000028454): a binary library op (`maximum`) on two Python numbers gave a
# float32 tensor in the oracle and a number in babytriton. babytriton's rule (an element-wise op on
# numbers only gives a number, as Python's math does) now holds in the oracle too (oracle._binary).
# babytriton fuzz program, seed 8000028454
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0, s0: int, s1: float):
    v0 = bt.gelu(broadcast_to(tanh(x0), (2, 15)))
    v1 = cos(max_sub(s0, 0.5))
    return v1, s1


ARGS = [('tensor', (15,), 'bfloat16', {'special': 0.05}), ('scalar', 'int', -1), ('scalar', 'float', -0.0)]
SEED = 8000028454
TOLERANCES = [(1.0017763568394002e-12, 0.0), (0.0, 0.0)]
