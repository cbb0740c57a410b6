# should-raise: torch raises on the program (e.g. max of an empty tensor); the compiled call returned a value
# torch raised IndexError: argmax(): Expected reduction dim to be specified for input.numel() == 0.; compiled returned <torch.float32 ()>
# babytriton fuzz program (minimised)
import torch
import babytriton as bt

@bt.jit(cache=False)
def f(x1: bt.Tensor((0,), 'float32')):
    v0 = x1.argmax()
    v3 = 1.5
    return v3
ARGS = [('tensor', (0,), 'float32')]
SEED = 2026006338
TOLERANCES = None
