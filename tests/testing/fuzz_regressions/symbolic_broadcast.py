# Found by the fuzzer (seed 50): a symbolic size broadcast against a static one (`d2` against 2)
# left Relax unable to infer the result's shape, so LegalizeOps skipped the op and the VM code
# generator failed ("CodeGenVM cannot emit this Relax operator directly"). Fixed: element-wise
# operands' symbolic sizes are matched to the sizes they meet (codegen `aligned`), checked per call.
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 2), 'int16'), x3: bt.Tensor(('d2',), 'bfloat16')):
    v1 = where(x0 > True, x3, x0)
    return v1, x0 * x3, maximum(x3, x0), x3 if x0 > 0 else 1


ARGS = [('tensor', (1, 2), 'int16'), ('tensor', (2,), 'bfloat16')]
SEED = 50
TOLERANCES = None
