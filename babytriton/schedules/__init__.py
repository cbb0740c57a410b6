"""How fused TIR kernels get a schedule: Dlight's rules plus babytriton's own, the tutorial's
Fallback-only mode, or MetaSchedule tuning with an on-disk database that later runs reuse.

On a GPU, "dlight" also hands matrix products and attention to torch (offload.py). On a CPU,
babytriton's own rules inline, parallelise (on torch's OpenMP threads: threads.py) and vectorise
every kernel, matrix products included (a register-tiled schedule that keeps their epilogues fused).
After scheduling, `serial_kernels` finds the kernels that would still run a large amount of work on
one thread (or one GPU block): the pipeline warns about them (SerialKernelWarning).

One strategy a module. The GPU rules, in the order they are tried (`gpu_rules`; the first that
schedules a kernel wins, each inside `Guarded`):
  dlight.gpu.Matmul, dlight.gpu.GEMV      matrix products and matrix-vector products (Dlight's)
  SmallReduction    small_reduction.py    reductions of a few elements over outer axes: a thread a column of vectors
  SplitReduction    split_reduction.py    a reduction to few results: chunks in parallel, then a fold
  RowReduction      row_reduction.py      a lone reduction along contiguous rows of a static width
  RowKernel         row_kernel.py         reductions then an element-wise block over static-width rows (64+ threads)
  InnerReduction    inner_reduction.py    any kernel reducing rows along their innermost axis: any width, outputs
  OuterReduction    outer_reduction.py    reductions over outer or middle axes: threads across the kept columns
  dlight.gpu.Reduction                    a reduction and its epilogue (Dlight's)
  LongRows          wrappers.py           Dlight's GeneralReduction, long row loops left as loops
  Tiled             transpose.py          an input read across its contiguous axis: tiles in shared memory
  Elementwise       elementwise.py        injective kernels: vectors of 16 bytes, any size (a scalar tail)
  dlight.gpu.Fallback   fallback.py       anything left: one thread per element (Dlight's, inlining bounded)
The CPU rules, in order (`cpu_rules`):
  CPUMatmul         cpu_matmul.py         matrix products: a register-tiled micro-kernel
  CPUTiled          cpu_transpose.py      an input read across its contiguous axis: cache-sized tiles
  CPUElementwise    cpu_elementwise.py    injective kernels: one loop, vectorised, parallel
  CPUOuterReduction cpu_outer_reduction.py  reductions (argmax pairs too) over outer or middle axes: whole rows, chunks of them
  CPUReduction      cpu_reduction.py      reductions with their element-wise blocks: rows, chunks, columns
  dlight.cpu.GEMV, dlight.cpu.Reduction   Dlight's CPU rules
  CPUSpatial        cpu_spatial.py        anything left: leading spatial loops in parallel
What the rules share: analysis.py, inlining.py (`inline`), lanes.py (vector widths), tails.py (ragged CPU
rows: whole vectors, then a scalar tail), kept_rows.py (a row read once into registers), cpu_rule.py
(CPURule), columns.py (which kept axes of a reduction are its inputs' contiguous ones); a rule that declines a kernel of its kind says why (reasons.py: `decline`; `k.fusion` shows
it where a kernel ends on Fallback). Around them: passes.py (the TIR passes after scheduling), loops.py
(parallel loops as GPU kernels), summary.py (`k.fusion`'s rule and launch shape; SerialKernelWarning),
fast_math.py (vectorisable exp, erf, tanh on CPUs), tuning.py (MetaSchedule).
"""
from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl

from .analysis import find_all, updated
from .cpu_elementwise import LONG_CHAIN_VECTORS, CPUElementwise
from .cpu_matmul import CPUMatmul
from .cpu_outer_reduction import CPUOuterReduction
from .cpu_reduction import CPUReduction
from .cpu_rule import MIN_PARALLEL, CPURule
from .cpu_spatial import CPUSpatial
from .cpu_transpose import CPUTiled
from .elementwise import Elementwise
from .fallback import Bounded, BoundedFallback
from .fast_math import fast_exp, vector_math
from .inner_reduction import InnerReduction
from .loops import launch_unscheduled, loops_to_kernels
from .outer_reduction import OuterReduction
from .passes import (bool_buffers_as_bytes, empty_kernels_done, half_math_in_float32, init_outside_reductions,
                     skip_empty_outputs, unit_reductions_as_maps, bfloat16_broadcasts_serial, kernels_as_built,
                     bfloat16_reads_in_binds)
from .row_kernel import RowKernel
from .thread_slices import THREAD_AXIS, own_thread_slices
from .row_reduction import RowReduction
from .small_reduction import SmallReduction
from .split_reduction import SplitReduction
from .summary import (SERIAL_LIMIT, SYMBOLIC_GUESS, SerialKernelWarning, launch_shape, schedule_summary,
                      serial_kernels, serial_work)
from .transpose import Tiled
from .tuning import TUNE_EXTRAS, meta_schedule, require_tuning_extras, tuning_dir
from .reasons import decline
from .wrappers import DECLINED_ATTR, RULE_ATTR, Declines, Guarded, LongRows, rule_name

__all__ = [
    "SCHEDULES", "gpu_rules", "cpu_rules", "apply",
    "Elementwise", "Bounded", "BoundedFallback", "Tiled", "CPUTiled", "SmallReduction", "RowReduction", "RowKernel", "InnerReduction", "SplitReduction", "Guarded", "LongRows", "rule_name", "RULE_ATTR",
    "decline", "Declines", "DECLINED_ATTR", "OuterReduction", "CPUOuterReduction",
    "CPURule", "CPUElementwise", "CPUReduction", "CPUMatmul", "CPUSpatial", "MIN_PARALLEL", "LONG_CHAIN_VECTORS",
    "THREAD_AXIS", "own_thread_slices", "fast_exp", "vector_math", "loops_to_kernels", "launch_unscheduled",
    "bool_buffers_as_bytes", "half_math_in_float32", "bfloat16_broadcasts_serial", "bfloat16_reads_in_binds", "kernels_as_built", "init_outside_reductions", "skip_empty_outputs", "updated", "find_all",
    "SERIAL_LIMIT", "SYMBOLIC_GUESS", "SerialKernelWarning", "launch_shape", "schedule_summary", "serial_kernels",
    "serial_work", "TUNE_EXTRAS", "meta_schedule", "require_tuning_extras", "tuning_dir",
]

SCHEDULES = ("dlight", "fallback", "meta_schedule")


def gpu_rules(schedule: str) -> list:
    if schedule == "fallback":  # the 2024 tutorial: one thread per element, nothing else
        return [Guarded(dl.gpu.Fallback(), guard=False)]
    return [Guarded(r) for r in (Bounded(dl.gpu.Matmul()), Bounded(dl.gpu.GEMV()), SmallReduction(), SplitReduction(), RowReduction(),
                                 RowKernel(min_threads=64), InnerReduction(), OuterReduction(), Bounded(dl.gpu.Reduction()),
                                 Bounded(LongRows(dl.gpu.GeneralReduction())), Tiled(), Elementwise())] + \
        [Guarded(BoundedFallback(), guard=False)]


def cpu_rules(schedule: str = "dlight") -> list:
    dlight = [dl.cpu.GEMV(), dl.cpu.Reduction()]  # all that Dlight has for CPUs
    if schedule == "fallback":
        return [Guarded(r) for r in dlight]
    # Dlight's Reduction once took 84 s of LLVM on a float16 softmax (scalarised <N x half> math):
    # such kernels now go to CPUReduction, and half arithmetic is float32 (half_math_in_float32)
    return [Guarded(r) for r in (CPUMatmul(), CPUTiled(), CPUElementwise(), CPUOuterReduction(), CPUReduction(), dl.cpu.GEMV(), dl.cpu.Reduction(),
                                 CPUSpatial())]


def apply(mod: tvm.IRModule, target: tvm.target.Target, schedule: str, trials: int) -> tvm.IRModule:
    """Schedule every TIR function of a fused module for `target`."""
    gpu = target.kind.name == "cuda"
    mod = unit_reductions_as_maps(empty_kernels_done(mod))
    if schedule == "meta_schedule":
        mod = meta_schedule(mod, target, trials)
    with target, Declines(mod) as declined:
        # Dlight skips functions already scheduled (tuned ones); on a GPU everything left needs threads.
        rules = gpu_rules("fallback" if schedule == "meta_schedule" else schedule) if gpu else cpu_rules(schedule)
        mod = dl.ApplyDefaultSchedule(*rules)(mod)
    mod = declined.onto(mod)  # why a kernel ended on Fallback (or on no rule), for k.fusion
    return launch_unscheduled(mod) if gpu else mod
