# fatal: the process died (SIGFPE) checking this program
# Found at seed 48000520: the std of a clamped (d0, 1, d2) tensor given (7, 1, 0). The CPU reduction's
# index arithmetic divided by d2 (`i // d2`, `i % d2`: the position in the fused axes); TVM's common-
# subexpression elimination hoisted those divisions out of their loops, which run no step when d2 is 0,
# and the hoisted division by zero ran.
# Fixed: lowering/divisors.nonzero_divisors divides index arithmetic by max(size, 1).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 1, 'd2'), 'int32')):
    v0b = x0 % (abs(x0) + 1)
    v1 = torch.clamp(torch.fmax(v0b.astype('float16'), v0b.astype('float64')), -0.875, 0.875)
    return std(v1)


ARGS = [('tensor', (7, 1, 0), 'int32')]
SEED = 48000520
TOLERANCES = [(1.0042632564145605e-12, 0.0)]
CUDA = True
