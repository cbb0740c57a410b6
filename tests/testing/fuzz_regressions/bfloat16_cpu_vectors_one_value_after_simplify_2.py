# compile-error: a vectorised CPU store of a bfloat16 value that TVM's simplifier makes the same in every lane
# could not build kernel `fused_layer_norm_cast2` of 'f' for the CPU: "dtype mismatch on BufferStore"
# Found at seed 41006526 (also 41002814, 41003792): a layer norm over rows of one element (`x - mean(x)`
# is `x - x`, simplified to 0), an int64 `x - x`, a `where(True, a, b)`: each value is one for all
# lanes only after TVM's simplification. Fixed as _1 (schedules.passes.bfloat16_broadcasts_serial).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((5, 1), 'bfloat16'), x3: bt.Tensor((2, 4), 'int64')):
    v3a, v3b = x0.split(3, dim=-2)
    v4 = layer_norm(v3b, ones((1,), 'bfloat16'), zeros((1,), 'bfloat16'), -1)
    v5 = (x3 - x3).astype(torch.bfloat16) * 2
    return v4, v5


ARGS = [('tensor', (5, 1), 'bfloat16'), ('tensor', (2, 4), 'int64')]
SEED = 41006526
TOLERANCES = None
