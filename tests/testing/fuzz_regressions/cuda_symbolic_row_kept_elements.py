# cuda-build: babytriton refused the program for the GPU
# could not build kernel `fused_add_silu_..._std` of 'f' for the GPU (it computes `std(v2a, keepdims=True)`)
# [BABYTRITON_DEBUG] Check failed: (dim_imm) is false: Can only handle constant size stack allocation for now
# Found (fuzzer, seed 41007120, CUDA run on the H200 host): `std` of a logaddexp chain over a row of
# symbolic length d0: the chain, too large to inline into both of std's passes, stayed a block whose
# elements InnerReduction kept in registers; a thread's share of a symbolic row is a symbolic count,
# no register array. Fixed: InnerReduction declines such a kernel (schedules/inner_reduction.py
# _intermediate_elements); Dlight's GeneralReduction schedules it.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1: bt.Tensor(('d0', 1), 'float32'), x2: bt.Tensor((1,), 'float32'), k: bt.constexpr):
    v2a = torch.logaddexp(torch.nn.functional.silu(x1), x2 + k)
    return std(v2a, keepdims=True)


ARGS = [('tensor', (16, 1), 'float32'), ('tensor', (1,), 'float32'), ('constexpr', 0.5)]
SEED = 41007120
TOLERANCES = None
CUDA = True
