# Found checking every op of the eager table in float64: TVM's layer_norm takes float32 and float16
# only, so a float64 layer_norm failed to build ("TVM failed to compile"). Now a clear refusal,
# compiled and eager (computing it in float32 would silently lose precision).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0):
    return layer_norm(x0, ones((3,), 'float64'), zeros((3,), 'float64'), -1)


ARGS = [('tensor', (2, 3), 'float64')]
SEED = 0
TOLERANCES = None
EXPECT_ERROR = "layer_norm() takes float32, float16, bfloat16 tensors, got a float64 tensor of shape (2, 3)"
