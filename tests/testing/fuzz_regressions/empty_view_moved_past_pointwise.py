# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during passes after DecomposeSoftmax)
# [BABYTRITON_DEBUG] Reshape expects the new shape to be convertible from the old shape. However, the
# old shape is R.shape([1, 0]), ... while the new shape is R.shape([1, 1])
# Found (fuzzer, seed 41005857, CUDA run on the H200 host): `where(m, y.reshape(1, 0), w)` of a
# computed empty y: the pass moving the view after the element-wise op (passes/views.py) viewed the
# other operands in y's shape (0, 1) with relax.op.reshape, which reads a size 0 as "the input's size
# there". Fixed: its reshapes are built as the exact shape (views._reshaped), as the frontend's are.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, x2):
    v2b = reshape(x0 + 1, (1, 0))
    return v2b if x2 else x1, torch.nn.functional.logsigmoid(reshape(x0 * x1, (1, 0)) * x1)


ARGS = [('tensor', (0, 1), 'float32'), ('tensor', (1,), 'float32'), ('tensor', (1,), 'bool')]
SEED = 41005857
TOLERANCES = None
CUDA = True
