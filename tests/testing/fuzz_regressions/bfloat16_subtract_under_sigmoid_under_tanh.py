# Found by the fuzzer (seed 9201028023): tanh(sigmoid(v0 - v0)) in bfloat16 failed in TVM's build (a
# variable bound twice) once legalize.subtract's guard no longer limited inlining. The guard counts
# as a call again (schedules.inlining.LINEAR_CALLS).
# babytriton fuzz program, seed 9201028023
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((3, 2), 'int64'), x1: bt.Tensor((1, 1), 'bfloat16'), x2):
    v0 = softmax(x1, axis=1)
    v1 = bt.sum(x0, axis=-1)
    v2 = bt.tanh(bt.sigmoid(v0 - v0))
    return v2, x1


ARGS = [('tensor', (3, 2), 'int64', {'view': 'step'}), ('tensor', (1, 1), 'bfloat16'), ('tensor', (), 'float64')]
SEED = 9201028023
TOLERANCES = [(0.203125000001, 0.0), (0.0, 0.0)]
