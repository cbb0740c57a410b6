# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during build after schedule); set BABYTRITON_DEBUG=1 to see the cause
# Found (fuzzer, seed 3000011): a bfloat16 copy of one value into every lane of a vectorised CPU loop
# (`broadcast_to` of a column or of one element): TVM's bfloat16 storage legalization retyped the store
# to uint16 lanes but kept the broadcast value's bfloat16x2 type ("dtype mismatch on BufferStore").
# Fixed: such a loop runs serially, LLVM's vectorizer takes it (schedules.passes.bfloat16_broadcasts_serial).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1):
    v0 = broadcast_to(x0.astype('bfloat16'), (2, 1))
    v1 = broadcast_to(x1, (8, 64))
    return v0, v1


ARGS = [('tensor', (1,), 'bfloat16'), ('tensor', (8, 1), 'bfloat16', {'special': 0.2})]
SEED = 3000011
TOLERANCES = None
CUDA = True
