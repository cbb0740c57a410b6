# cuda-build: the program builds and runs on the CPU; building it for CUDA (sm_90) failed
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Found (fuzzer, seed 100000339): a split's first piece was a second result of the kernel casting it, for
# an `if` dropped later as dead code; tvm.compile's own FuseOps/FuseTIR made a group of that scheduled
# kernel and turned its unused result into a buffer inside it ("Cannot allocate global memory when
# targeting CUDA"). Fixed: scheduled kernels are opaque to TVM's build (schedules.passes.kernels_as_built).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0',), 'float32'), x1: bt.Tensor((13,), 'int16')):
    v0a, v0b = torch.split(x1, [9, 4], dim=-1)
    if v0b.min() <= 0.5:
        v1 = x0
    else:
        v1 = x0.astype(torch.float32)
    v3a = astype(v0a, 'float64')
    return v3a


ARGS = [('tensor', (13,), 'float32'), ('tensor', (13,), 'int16')]
SEED = 100000339
TOLERANCES = None
CUDA = True
