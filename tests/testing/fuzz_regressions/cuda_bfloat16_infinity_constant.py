# cuda-nvcc: the program builds for CUDA (sm_90), but nvcc rejects the generated CUDA source
# Compilation error:
# /tmp/tmpps481ycn/tvm_kernels.cu(130): error: identifier "inff" is undefined
# 1 error detected in the compilation of "/tmp/tmpps481ycn/tvm_kernels.cu".
# Found (fuzzer, seed 100000422, --cuda): torch.nan_to_num of a bfloat16 tensor compares with ±inf; TVM's
# CUDA code generator prints a bfloat16 ±inf or NaN constant as `__float2bfloat16_rn(inff)` (`nanf`).
# Fixed: on CUDA each non-finite constant narrower than float32 is float32's (CUDART_INF_F, CUDART_NAN_F)
# converted, after the device module's last simplification (pipeline.half_specials_from_float32).
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x0, s1: bool):
    v0 = s1 > x0
    v4a, v4b = torch.chunk(v0, 2, 0)
    v4 = torch.nan_to_num(v4b.astype('bfloat16'), nan=0.0, posinf=1.0, neginf=1.0)
    return v4
ARGS = [('tensor', (2, 1), 'int32'), ('scalar', 'bool', True)]
SEED = 100000422
TOLERANCES = None
CUDA = True
