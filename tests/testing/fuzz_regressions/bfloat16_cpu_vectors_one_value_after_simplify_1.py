# compile-error: a vectorised CPU store of a bfloat16 value that TVM's simplifier makes the same in every lane
# could not build kernel `fused_multiply_multiply_cast_equal_where` of 'f' for the CPU: "dtype mismatch on
# BufferStore: buffer's dtype is `T.uint16` ... but RHS's dtype is `T.bfloat16x2`"
# Found at seed 41003729 (also 41001990): `where(c, x, x)` of a bfloat16 scalar became `x` in TVM's
# simplification after scheduling, the vectoriser broadcast it, and TVM's bfloat16 storage legalization
# kept the broadcast's type. Fixed: schedules.passes.bfloat16_broadcasts_serial judges a store's value
# simplified, as TVM will, before deciding it varies across the vector's lanes.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((), 'bfloat16'), x1, x2: bt.Tensor(('d0', 'd1'), 'float32')):
    return x0 if ((x1 ** 3) == x2) else x0


ARGS = [('tensor', (), 'bfloat16'), ('tensor', (2,), 'int16'), ('tensor', (3, 2), 'float32')]
SEED = 41003729
TOLERANCES = [(0.0, 0.0)]
