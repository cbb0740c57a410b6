"""Triton's programming model on TensorIR: `import babytriton.triton as triton` and
`import babytriton.triton.language as tl` run Triton kernels (one program per block of work, pointer
blocks, masks, `kernel[grid](...)`) compiled for GPU and CPU, or interpreted with torch
(`BABYTRITON_INTERPRET=1`).

May import: runtime, lowering, schedules, codegen, frontend, core (not jit/versions/backends/torch/eager)."""
from types import SimpleNamespace

from . import language
from .jit import (Autotuner, Config, Heuristics, JITFunction, autotune, cdiv, do_bench, heuristics, interpret_mode,
                  jit, next_power_of_2)

# `triton.testing.do_bench`, as the tutorials time kernels
testing = SimpleNamespace(do_bench=do_bench)

__all__ = ["Autotuner", "Config", "Heuristics", "JITFunction", "autotune", "cdiv", "do_bench", "heuristics",
           "interpret_mode", "jit", "language", "next_power_of_2", "testing"]
