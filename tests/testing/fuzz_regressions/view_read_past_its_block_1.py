# compile-error: torch runs the program; babytriton refused it ("Var gv6 is not defined" in the build)
# Found by the fuzzer (seed 41005834): `v0 = flatten(...)`, then `v0.argmin()` (a run-time check of an
# empty axis between two dataflow blocks), then several readers of v0 after the check. repeat_views gave
# each reader its own copy of the view, reading the first block's values past the block. Fixed: a view
# read outside its own dataflow block keeps its one binding (passes/views.py, repeat_views).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1',), 'float64')):
    v0 = flatten(((bt.negative(x0)) @ (bt.negative(x0))) + (x0 if (x0 >= x0) else (subtract(x0, x0))))
    v1 = v0.argmin()
    v2a, v2b = tanh(v0 + v0), v0 @ v0
    v3 = (negative(x0)) @ (negative(x0))
    v4 = matmul(bt.softmax(v0, axis=0), bt.softmax(v0, axis=0))
    return v4


ARGS = [('tensor', (2,), 'float64')]
SEED = 41005834
TOLERANCES = [(1.0177635683940025e-12, 0.0)]
