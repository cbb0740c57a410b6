# Found by the fuzzer (seed 8000024744): a binary library op (`maximum`) on two Python numbers gave a
# float32 tensor in the oracle and a number in babytriton. babytriton's rule (an element-wise op on
# numbers only gives a number, as Python's math does) now holds in the oracle too (oracle._binary).
# babytriton fuzz program, seed 8000024744
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((1, 4), 'float32'), x2: bt.Tensor(('d1',), 'float16'), x3: bt.Tensor((1, 'd1'), 'float16')):
    v0 = max_sub(x1.ndim, 2.0)
    return v0, x0


ARGS = [('tensor', (4,), 'int32'), ('tensor', (1, 4), 'float32', {'special': 0.2}), ('tensor', (4,), 'float16', {'special': 0.05}), ('tensor', (1, 4), 'float16')]
SEED = 8000024744
TOLERANCES = [(0.0, 0.0), (0.0, 0.0)]
