# crash: torch runs the program; the compiled call raised
# RuntimeError: f(): the compiled code stopped with an error (set BABYTRITON_DEBUG=1 to see TVM's message)
# Traceback (most recent call last):
#   File "babytriton/testing/fuzz.py", line 1197, in check_module
#     got = module.f(*fresh())
#           ^^^^^^^^^^^^^^^^^^
#   File "babytriton/jit.py", line 296, in __call__
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0):
    v4b = relu(x0)
    return v4b
ARGS = [('tensor', (1, 0, 1), 'float64', {'view': 'step'})]
SEED = 2026006269
TOLERANCES = None
