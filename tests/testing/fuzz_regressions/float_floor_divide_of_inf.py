# torch-mismatch: the compiled result differs from torch's (value, dtype or shape)
# values differ at (0, 0, 1): compiled 1.125, torch 0.0 (atol 1.03375e-12, rtol 0; 9 of 80 differ)
# babytriton fuzz program, seed 7001021060
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor((1, 1), 'bool'), x2):
    v0 = x0
    for i in range(3):
        if i == 1:
            continue
        v0 = v0 + (x2 // (abs(x1.astype('float64')) + 1))
    v1a, v1b = bt.negative(matmul(permute_dims((x1.shape[1]) / (abs(x2) + 1)), (x1.shape[1]) / (abs(x2) + 1))), (subtract((-1), bt.sum(x0, axis=-3))) // (abs(x0 + (x0 // (abs(x2) + 1))) + 1)
    v2 = 2.0 >= v1b
    v3 = (x0 / (abs((v0 * 0) / (abs(v0) + 1)) + 1)) * (v2.astype(torch.float16))
    return v3


ARGS = [('tensor', (10, 4, 2), 'float64', {'special': 0.05}), ('tensor', (1, 1), 'bool', {'view': 'step'}), ('tensor', (4, 2), 'float16', {'special': 0.05})]
SEED = 7001021060
TOLERANCES = [(1.0337507799486047e-12, 0.0)]
