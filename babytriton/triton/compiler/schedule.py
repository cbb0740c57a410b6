"""The block program mapped onto a target by its annotated loops (emit.py): cpu.py (a parallel loop
over programs, vectorised block loops) or gpu.py (a thread block per program, block values spread
over its threads)."""
from __future__ import annotations

import tvm
from tvm import tirx

from . import cpu, gpu


def schedule(func: tirx.PrimFunc, target: tvm.target.Target, num_warps: int, num_stages: int = 3) -> tirx.PrimFunc:
    """The block program `func` mapped onto `target` (num_warps * 32 threads a program on a GPU, a
    dot's K loop pipelined over num_stages slots of its operand tiles)."""
    if target.kind.name != "cuda":
        return cpu.schedule(func)
    arch = str(target.attrs.get("arch", "sm_80"))   # tensor cores' mma.sync m16n8k16 from sm_80 on
    return gpu.schedule(func, num_warps, tensor_cores=arch[3:].isdigit() and int(arch[3:]) >= 80,
                        num_stages=num_stages)
