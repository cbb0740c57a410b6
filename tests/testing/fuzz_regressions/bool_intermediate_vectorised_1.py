# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Found: a bool buffer between two vectorised CPU blocks (argmin's compares) became int8 lanes in TVM's
# StorageRewrite that the next block used as bools; LLVM's verifier refused "and <2 x i1>, <2 x i8>".
# Fixed: bool intermediate buffers of CPU kernels are stored as int8 (schedules.bool_buffers_as_bytes).
# babytriton fuzz program, seed 8000024249
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0):
    v0 = (x0 * (subtract(x0, x0))) - (x0 // (abs(x0 * x0) + 1))
    v1 = x0 != (bt.argmin(v0, axis=0)) < (squeeze(v0))
    return v1


ARGS = [('tensor', (4, 2), 'float32', {'special': 0.2})]
SEED = 8000024249
TOLERANCES = [(0.0, 0.0)]
