# Found by the fuzzer (seeds 6000130, 6000694, 6000788, ...): rms_norm of a 1-d tensor failed in TVM's
# LegalizeOps ("Tensor dimension mismatch in read"). Fixed: it runs on a (1, n) view. (And float64:
# TVM computes it in float32, so babytriton refuses float64 rms_norm, as it does layer_norm.)
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((3,), 'float32'), x1):
    return rms_norm(x0, ones((3,), 'float32')), rms_norm(x1, x1 + 2), rms_norm(x0.reshape(1, 3), ones((3,), 'float32'))


ARGS = [('tensor', (3,), 'float32'), ('tensor', (5,), 'float16')]
SEED = 6000788
TOLERANCES = None
