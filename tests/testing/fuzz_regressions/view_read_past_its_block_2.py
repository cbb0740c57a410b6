# compile-error on the H200 host (seed 41006825): "Var v0a is not defined" in the build
# Found by the fuzzer: a chunk's halves (views of a tensor `if`'s result) read in a later dataflow block
# than theirs; repeat_views repeated the views there, reading their block's values past it (as in
# view_read_past_its_block_1.py). Fixed there; also built for sm_90 (CUDA = True).
CUDA = True
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0, x1, s0, s1):
    v0a, v0b = ((-1) if (s0 <= x0) else x0).chunk(2, dim=0)
    v0 = v0a + (torch.nn.functional.gelu((v0b.astype('float16'))))
    v1a, v1b = torch.split(v0a, [31, 1], dim=-1)
    v2 = broadcast_to(v1b % (abs(x0) + 1), (2, 64))
    v3 = v1b + ((torch.atan2(v1b // (abs(s1) + 1), abs(astype(v0b ** 2, 'float32')) + 1)) / (abs(1.5) + 1))
    v4 = cos(v3)
    return v4, x1


ARGS = [('tensor', (64,), 'int64'), ('tensor', (1, 64), 'float32', {'view': 'neg'}), ('scalar', 'auto-int', 3), ('scalar', 'auto-float', 1.25)]
SEED = 41006825
TOLERANCES = [(6.866456078125001e-06, 0.0), (0.0, 0.0)]
