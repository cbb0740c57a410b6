"""The compiler from Triton kernels to TensorIR: `compile(jit_fn, signature, constants, options)` ->
a `CompiledKernel` that launches over a grid with the caller's tensors.

Route (why this one): the kernel's AST becomes one TIR PrimFunc, "the block program" (codegen.py):
a loop over the grid's programs, and inside one program each block operation a loop nest over the
block's shape, annotated as such (emit.py). Element-wise values are TIR expressions inlined into
their consumers, so only loads, reductions, `dot` results and loop-carried values take buffers.
The schedule (schedule.py: cpu.py, gpu.py) then maps those annotated nests onto the target: CPU, a
parallel loop over programs and the innermost block loops vectorised (masked vectors only at a
block's ragged edge); GPU, a thread block per program and each nest's elements spread over
num_warps * 32 threads, a value each thread reads only at its own elements in its registers, the
rest in shared memory, a reduction to a scalar through TVM's thread all-reduce (warp shuffles). Emitting plain loop nests (rather than SBlocks for TVM's
schedule primitives) keeps the stages short and readable and the mapping ours to explain: a Triton
program has loops, loop-carried blocks and masks that SBlock scheduling (compute_at, inline)
would have to see through.

Stages: "python", "block" (the unscheduled PrimFunc), "schedule", "source" (CUDA or LLVM IR).

Supported: the builtins in builtins.BUILTINS (program ids, arange/zeros/full, masked load/store with
`other`, atomic_add (its result, the old values, is not kept), shapes (`[:, None]`, broadcast_to,
expand_dims, reshape, trans), casts, dot (rank 2: on tensor cores for float16/bfloat16 on a GPU
(mma.py; its K loop pipelined over num_stages slots of its tiles, pipelining.py), else a reduction
nest; rank 3, batched, a reduction nest of multiply-adds),
sum/max/min/argmax/argmin, where/maximum/minimum/clamp/abs, the math functions, cdiv, hints), Python
operators on blocks and constexprs, `if` (constexpr: folded; scalar: a run-time branch),
range/tl.range/static_range loops with loop-carried blocks and pointers, @triton.jit helpers. Refused at the user's line: `while`, `return` under run-time control
flow, subscripts other than `:`/`None`, assignments to anything but names, any other builtin
(device_print and print of blocks run in interpret mode). On a CPU, a kernel with atomics runs its
programs one after another (its updates are then plain ones).
"""
from __future__ import annotations

import torch
import tvm

from ...core import targets
from ...core.errors import debug_enabled, quiet_tvm
from ...frontend.source import environment, parse_function
from ...lowering import pipeline
from ..language import core
from . import cpu, schedule
from .codegen import KernelCompiler


class CompiledKernel:
    """One specialisation of a kernel, built for one target: `launch(grid, args)`, `stages`."""

    from_disk = False     # loaded from the disk cache (triton/disk.py) instead of compiled
    cache_key = None      # its runtime.cache.CacheKey and entry folder, where the disk cache holds it
    cache_path = None
    _run = None           # its launch (launcher.runner), made on first use
    work = None           # on a CPU, a program's block elements where the grid alone sets them (cpu.work)

    def __init__(self, name: str, executable, stages: dict, params: list, device_kind: str):
        self.name = name
        self.executable = executable
        self.stages = stages
        self.params = params            # per runtime argument: "pointer" or "scalar"
        self.device_kind = device_kind
        self._function = executable[name]

    @property
    def source(self) -> str:
        """The generated code, the last stage: CUDA for a GPU, LLVM IR for a CPU."""
        return self.stages["source"]

    def __repr__(self) -> str:
        how = "loaded from the disk cache" if self.from_disk else "compiled"
        return f"<CompiledKernel {self.name} for {self.device_kind}, {how}>"

    def __str__(self) -> str:
        lines = [repr(self)] + [f"  {stage:<9} {text.count(chr(10)) + 1:>6} lines"
                                for stage, text in self.stages.items()]
        if self.cache_path:
            lines.append(f"  cache entry {self.cache_path}")
        return "\n".join(lines + ["(.stages[NAME] is one stage's text, .source the generated code)"])

    def launch(self, grid: tuple, args: tuple) -> None:
        """Run every program of `grid` (three ints) on `args` (the kernel's runtime arguments, in order)."""
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: expected {len(self.params)} runtime arguments, got {len(args)}")
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        if min(grid) <= 0:
            return
        self.launcher()(grid, args)

    def launcher(self):
        """The launch as one cheap function (grid of three ints, runtime args): what `launch` does less
        its checks, for the launch fast path (launcher.py), whose key already fixed the argument types."""
        if self._run is None:
            from .. import launcher
            self._run = launcher.runner(self)
        return self._run


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's memory from its first element on, as a 1-D view (no copy): the kernel indexes it
    with the offsets it computes from the strides it was given."""
    if not tensor.requires_grad and tensor.is_contiguous():   # the common case: at most one cheap view
        return tensor if tensor.dim() == 1 else tensor.view(-1)
    tensor = tensor.detach()   # DLPack takes no tensor that requires grad; the memory is the same
    if tensor.numel() == 0:
        return tensor.reshape(-1)[:0]
    span = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return torch.as_strided(tensor, (span,), (1,))


def _types(signature: dict, names: list[str], constants: dict) -> dict:
    """The signature as the language's types (a pointer_type, a dtype); strings in Triton's spelling
    ('*fp32', 'i32', 'fp32') are read too."""
    by_name = {d.name: d for d in core.DTYPES}
    by_name.update({"i1": core.int1, "i8": core.int8, "i16": core.int16, "i32": core.int32, "i64": core.int64,
                    "u8": core.uint8, "u16": core.uint16, "u32": core.uint32, "u64": core.uint64})
    out = {}
    for name in names:
        if name in constants:
            continue
        kind = signature[name]
        if isinstance(kind, str):
            kind = core.pointer_type(by_name[kind[1:]]) if kind.startswith("*") else by_name[kind]
        out[name] = kind
    return out


def compile(jit_fn, signature: dict, constants: dict, options: dict | None = None) -> CompiledKernel:  # noqa: A001
    """Compile `jit_fn` for these argument types (`signature`: parameter name -> type) and constexpr
    values (`constants`); `options`: "target" ("cpu"/"cuda" or a tvm Target), "num_warps"."""
    options = dict(options or {})
    fn = getattr(jit_fn, "fn", jit_fn)
    parsed = getattr(jit_fn, "parsed", None) or parse_function(fn)
    target = _target(options.get("target", "cpu"))
    gpu = target.kind.name == "cuda"
    names = [a.arg for a in parsed.tree.args.args]
    types = _types(signature, names, constants)
    stages = {"python": parsed.source}
    compiler = KernelCompiler(parsed, environment(fn), types, constants, gpu)
    func = compiler.build()
    stages["block"] = func.script()
    name = parsed.tree.name
    stage = "schedule"
    try:
        with quiet_tvm():
            func = cpu.with_ones(func, options.get("equal_to_1", ()))
            work = None if gpu else cpu.work(func)
            func = schedule.schedule(func, target, int(options.get("num_warps", 4)), int(options.get("num_stages", 3)))
            stages["schedule"] = func.script()
            stage = "build"
            executable = (pipeline.compile_module if gpu else cpu.build)(tvm.IRModule({name: func}), target)
    except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
        message = f"TVM failed to compile '{name}' (during {stage})"
        detail = f"\n[BABYTRITON_DEBUG] {e}" if debug_enabled() else "; set BABYTRITON_DEBUG=1 to see the cause"
        raise parsed.source_map.error(parsed.tree, message + detail) from (e if debug_enabled() else None)
    stages["source"] = pipeline.generated_source(executable, target)
    params = ["pointer" if isinstance(types[n], core.pointer_type) else "scalar" for n in names if n in types]
    kernel = CompiledKernel(name, executable, stages, params, "cuda" if gpu else "cpu")
    kernel.work = work
    return kernel


def _target(target) -> tvm.target.Target:
    return targets.resolve_target(target)


__all__ = ["compile", "CompiledKernel"]
