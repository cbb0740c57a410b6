"""Reading a @jit function: its source, and the names it reads besides its own (globals, closure)."""
import torch

import babytriton as bt
from babytriton.frontend.source import environment

SCALE = 2.0


def scaled_by(scale: float):
    SCALE = scale  # noqa: N806 - shadows the module's SCALE in the closure

    def relax_scaled(x):
        return x * SCALE

    def tir_scaled(x: bt.Tensor(("n",), "float32"), out: bt.Tensor(("n",), "float32")):
        for i in bt.parallel(x.shape[0]):
            out[i] = x[i] * SCALE
    return relax_scaled, tir_scaled


def test_closure_names_shadow_globals():
    relax_scaled, tir_scaled = scaled_by(3.0)
    names = environment(relax_scaled)
    assert names["SCALE"] == 3.0 and names["torch"] is torch   # the closure's, and a global
    x = torch.randn(5)
    torch.testing.assert_close(bt.jit(relax_scaled)(x), relax_scaled(x))
    out, expected = torch.empty(5), torch.empty(5)
    bt.jit(tir_scaled, backend="tir")(x, out)
    tir_scaled(x, expected)   # plain Python: bt.parallel is range
    torch.testing.assert_close(out, expected)
