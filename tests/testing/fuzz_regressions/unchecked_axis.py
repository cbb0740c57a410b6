# Found checking every op of the eager table on 1-d tensors: TVM does not check the axis of sort,
# argsort, topk, cumsum, cumprod, repeat, split, take and gather_elements. `sort(x, axis=1)` of a 1-d
# tensor compiled, then raised TVM's InternalError ("Axis out of boundary") at the call; cumsum's
# failed to build. Fixed: babytriton checks those axes and names the op and the valid range.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0):
    return sort(x0, axis=1, descending=True)


ARGS = [('tensor', (6,), 'float32')]
SEED = 0
TOLERANCES = None
EXPECT_ERROR = "sort(): axis 1 is out of range for a 1-d tensor (axes go from -1 to 0)"

