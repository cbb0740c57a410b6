# expect: CompilationError
# names: parameter 'x'
from __future__ import annotations

import torch
import babytriton as bt


def make():
    class Local:
        pass

    @bt.jit
    def f(x: Local):  # error: which cannot be evaluated from the module's globals
        return x
    return f


make()
