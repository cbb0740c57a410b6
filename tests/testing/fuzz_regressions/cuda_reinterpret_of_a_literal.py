# cuda-nvcc: the program builds for the CPU; its CUDA, compiled by nvcc: "expression must be an lvalue or
# a function designator"
# Found at seed 41005949 (also 41005482, 41005867, 41006350): `x - (y - y)` keeps its divisor-like
# operand from TVM's simplifier behind two reinterprets (legalize.kept); TVM's lowering then folded
# `y - y` to 0 inside them, and the CUDA code generator printed the reinterpret of the literal as its
# address (`*(int64_t *)(&(0.0))`). Fixed: lowering/cuda_spelling.nvcc_spellings folds a reinterpret of
# a literal into the literal of its bits, after the device module's last simplification.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, x2, s0: int):
    return x0 - (x1 - x1), (x2.astype('float32') - (s0 - s0)) * 2


ARGS = [('tensor', (1, 4), 'float64'), ('tensor', (1, 1), 'int8'), ('tensor', (3,), 'int16'), ('scalar', 'int', -1)]
SEED = 41005949
TOLERANCES = None
CUDA = True
