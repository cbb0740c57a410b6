# Found by the fuzzer (seeds 2001102, 2001884): two different symbolic sizes meeting on one axis
# (`x0.T * x0` with x0 of shape (d0, d1)) compiled to an op whose result shape Relax could not
# infer, and TVM's build failed ("CodeGenVM cannot emit this Relax operator"). Nothing says d0
# equals d1, so babytriton now refuses the program with a message naming both sizes.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor(('d0', 'd1'), 'int64')):
    v0 = x0 > x0.T * x0
    v2 = x0.sum(axis=0).astype('float32')
    return v2


ARGS = [('tensor', (2, 2), 'int64')]
SEED = 2001102
TOLERANCES = None
EXPECT_ERROR = "the sizes d1 and d0 meet on one axis here"
EAGER_RUNS = True  # with these sizes (2 == 2) torch computes it
