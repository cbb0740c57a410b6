"""The TensorIR backend: code generation, where bt.parallel loops run (the schedule), and building;
the build is a `runtime.Compiled` as the Relax backend's, and runtime.Kernel calls the PrimFunc with
the caller's own tensors.

Stages: "python", "ast", "tir" (the code generator's PrimFunc), "schedule" (bt.parallel loops made
into GPU kernels or CPU thread-pool loops), "source". A call writes into the parameters the function
assigns elements of and returns them: None without any, the tensor for one, a tuple (in parameter
order) for several.
"""
from __future__ import annotations

import tvm

from ..lowering import pipeline
from .. import schedules
from ..frontend.arguments import ArgSpec
from ..codegen.tir import TIRCodeGen
from ..core.errors import debug_enabled
from ..frontend.function import FunctionInfo
from ..runtime.kernel import Compiled

# --------------------------------------------------------------------------------------------------
# Building and calling
# --------------------------------------------------------------------------------------------------

def build(info: FunctionInfo, specs: tuple[ArgSpec, ...], record, stages: dict) -> Compiled:
    """Compile one version of a backend="tir" function: code generation, schedule, tvm.compile."""
    named = dict(zip((p.name for p in info.params), specs))
    codegen = TIRCodeGen(info.parsed, named, info.codegen_options)
    mod = codegen.build()
    record("tir", mod.script())
    target = info.target
    name = info.parsed.name
    stage = "schedule"
    try:
        mod = tvm.IRModule({name: schedules.loops_to_kernels(mod[name], target)})
        record("schedule", mod.script())
        stage = "build"
        executable = pipeline.compile_module(mod, target)
    except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
        message = f"TVM failed to compile '{name}' (during {stage})"
        if debug_enabled():
            raise info.parsed.source_map.error(info.parsed.tree, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
        raise info.parsed.source_map.error(
            info.parsed.tree, message + "; set BABYTRITON_DEBUG=1 to see the cause") from None
    record("source", pipeline.generated_source(executable, target))
    return Compiled("tir", executable, mod, stages, outputs=tuple(codegen.outputs))
