# compile-error: torch runs the program; babytriton refuses it
# TVM failed to compile 'f' (during passes after FuseMultiOutput); set BABYTRITON_DEBUG=1 to see the cause
# Found (fuzzer, seed 5 of the CI batch): the first piece of a split (`x[:1]` of a (2,)) copied by a kernel of
# its own, which TVM's has_reshape_pattern takes for a reshape (its index is the identity): made a view, it
# was a reshape from 2 elements to 1 ("Reshape expects the new shape to be convertible from the old shape").
# Fixed: a kernel is a reshape view only where both sides hold as many elements (views._same_size).
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1, x2):
    v0a, v0b = x1.split(1, dim=-1)
    v1 = bt.log_softmax(v0a, axis=-1)
    v2 = torch.log_softmax(x2[:, :1], -1)
    return v1, v2


ARGS = [('tensor', (2,), 'float32'), ('tensor', (3, 4), 'float32', {'special': 0.2})]
SEED = 5
TOLERANCES = None
CUDA = True
