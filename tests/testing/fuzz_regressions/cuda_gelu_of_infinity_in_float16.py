# torch-mismatch on the H200 host (seed 41001553): compiled atan2(gelu(inf), y) = pi/2, torch NaN
# torch's float32 gelu kernel (which float16 and bfloat16 use too) gives NaN at +inf on AVX-512 CPUs
# (this machine's and the H200 host's), inf elsewhere and in float64; babytriton's kernels give inf.
# Fixed: the oracle (testing/oracle.py) and the eager reference (eager/ops.py) compute gelu in float64
# and round once, so neither depends on the CPU; the compiled result is unchanged.
CUDA = True
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d1', 'd2'), 'int8'), x1: bt.Tensor((1, 2, 1000), 'float64'), x2: bt.Tensor((1, 1, 'd2'), 'float16'), s0, s1, k: bt.constexpr):
    v0 = torch.atan2(gelu(x2), abs(bt.rsqrt(abs(x2) + 1)) + 1)
    v1a, v1b = torch.split(x1, [1, 1], dim=-2)
    return v1b, s0, v0


ARGS = [('tensor', (2, 1000), 'int8'), ('tensor', (1, 2, 1000), 'float64', {'special': 0.2}), ('tensor', (1, 1, 1000), 'float16', {'special': 0.2, 'view': 'T'}), ('scalar', 'auto-float', -2.0), ('scalar', 'auto-int', -2), ('constexpr', 3)]
SEED = 41001553
TOLERANCES = [(0.0, 0.0), (0.0, 0.0), (0.134375000001, 0.0)]
