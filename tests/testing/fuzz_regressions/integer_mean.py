# Found by the fuzzer (seeds 1000037, 1000097, 1000187, 1000239): `mean` of an integer tensor came
# back int64 where Relax declares the input's dtype, and failed to compile for int32 with keepdims.
# torch refuses the mean of integers; so does babytriton now (mean, std and variance need floats),
# compiled and eager alike.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x1):
    v0 = x1.mean(axis=0)
    return v0


ARGS = [('tensor', (1, 1), 'int8')]
SEED = 1000037
TOLERANCES = None
EXPECT_ERROR = "could not infer output dtype: the input must be a float tensor, got an int8 tensor of shape (1, 1)"
