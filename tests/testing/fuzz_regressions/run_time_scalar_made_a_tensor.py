# should-raise: torch raises on the program; the compiled call returned a value
# torch raised RuntimeError: expected dtype float for `end` but got dtype double; compiled returned (<torch.float64 (2,)>, ...)
# Found (fuzzer, seed 41001495, H200 host): `reshape(max_sub(k, s0), (1,))` of a run-time float
# scalar s0 was a float64 tensor (the dtype that carries a Python float), where torch.as_tensor gives
# float32; and torch.lerp, which promotes nothing, took a float64 `end` for a float32 start. Fixed: a
# run-time scalar that an op of one tensor operand (not element-wise) takes becomes a tensor as a number
# does (codegen/library.py _call); torch.lerp checks its dtypes as torch does (pointwise.py _lerp_dtypes).
import torch
import babytriton as bt


@bt.jit(cache=False)
def max_sub(a, b):
    return maximum(a, b) - b


@bt.jit(cache=False)
def f(x0, x1: bt.Tensor(('d2',), 'float32'), s0, k: bt.constexpr):
    v0 = torch.lerp(reshape(max_sub(k, s0), (1,)), astype((x1 != x0).astype('float16'), 'float64'), 0.25)
    return v0, s0, x1


ARGS = [('tensor', (2,), 'int8'), ('tensor', (2,), 'float32'), ('scalar', 'auto-float', 1.75), ('constexpr', 1.5)]
SEED = 41001495
TOLERANCES = None
