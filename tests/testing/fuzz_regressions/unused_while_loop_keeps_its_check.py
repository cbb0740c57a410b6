# should-raise: torch raises on the program (e.g. max of an empty tensor); the compiled call returned a value
# torch raised IndexError: amax(): Expected reduction dim 0 to have non-zero size.; compiled returned <torch.int64 (3,)>
# Found: the `while` loop's results (v2) are never used, so its call was pure dead code and
# DeadCodeElimination removed it with the empty-max check in its body. Fixed: a loop function whose
# body can raise (a run-time check, or a call of one that can) is declared impure (loop_functions.py).
# babytriton fuzz program, seed 41000218
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((1, 1), 'float32'), x1, x2: bt.Tensor(('d0', 'd1'), 'int16'), x3: bt.Tensor((0, 3), 'float32'), k: bt.constexpr):
    v0 = max(x2 + x2, axis=-1)
    v1a, v1b = 3 - x1, argmax(matmul(permute_dims(x0), x0), dim=-1)
    v2 = torch.sqrt((abs(v0) + 1))
    c = zeros((), 'int64')
    while c < 4:
        v2 = v2 - (log_softmax(astype((v0.max()) + v1b, 'float32'), axis=0))
        c = c + 1
    v3 = torch.nan_to_num((log_softmax(v2, axis=0)), nan=0.0, posinf=1.0, neginf=-1.0)
    v4 = bt.sum(v1a, dim=0)
    return v4


ARGS = [('tensor', (1, 1), 'float32'), ('tensor', (1, 3), 'int8', {'view': 'step'}), ('tensor', (0, 3), 'int16', {'view': 'T'}), ('tensor', (0, 3), 'float32'), ('constexpr', 3)]
SEED = 41000218
TOLERANCES = [(0.0, 0.0)]
