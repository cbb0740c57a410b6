"""The Relax backend: code generation to a Relax IRModule, the pipeline of passes and schedules, and
tvm.compile to a Relax VM executable. Its build is a `runtime.Compiled`, as the TIR backend's.

Stages: "python", "ast" (recorded by the driver), "relax", one per pass of the pipeline, "source".
"""
from __future__ import annotations

import ast
import gc

import tvm

from . import cache, fusion, pipeline, schedules
from .arguments import ArgSpec
from .codegen.relax import RelaxCodeGen, quiet_tvm
from .errors import debug_enabled
from .frontend import FunctionInfo
from .runtime import Compiled


def build(info: FunctionInfo, specs: tuple[ArgSpec, ...], record, stages: dict) -> Compiled:
    """Compile one version: code generation, the pipeline's passes and schedules, tvm.compile. A TVM
    failure is reported at the expression whose op fails alone, if one does, else at the `def`."""
    options = info.options
    if options["schedule"] == "meta_schedule":  # before compiling: say which extra to install
        schedules.require_tuning_extras()
    named = dict(zip((p.name for p in info.params), specs))
    codegen = RelaxCodeGen(info.parsed, named, info.codegen_options)
    generated = mod = codegen.build()
    record("relax", mod.script())
    target = info.target
    stage = "passes"
    modules: dict[str, tvm.IRModule] = {}
    failed = None
    with quiet_tvm():
        try:
            mod = pipeline.lower(mod, target, options["schedule"], record, options["trials"], modules)
            stage = "build"
            executable = pipeline.build(mod, target)
        except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
            var = pipeline.failing_binding(generated, target, options["schedule"], options["trials"])
            node = codegen.binding_nodes.get(var, info.parsed.tree) if var is not None else info.parsed.tree
            during = f"during {stage} after {list(stages)[-1]}"
            message = f"TVM failed to compile '{info.name}' ({during})" if node is info.parsed.tree else \
                f"could not compile `{ast.unparse(node)}`: the compiler failed on it ({during})"
            if debug_enabled():
                raise info.parsed.source_map.error(node, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
            failed = (node, message + "; set BABYTRITON_DEBUG=1 to see the cause")
        if failed:  # TVM's objects in the failed passes are freed here, their warnings silenced
            gc.collect()
    if failed:
        raise info.parsed.source_map.error(*failed)
    record("source", pipeline.generated_source(executable, target, both="vdevice" in mod.global_infos))
    return Compiled("relax", executable, mod, stages, _fusion_record(info, generated, codegen.binding_lines, modules),
                    tuple(codegen.size_checks))


def _fusion_record(info: FunctionInfo, generated, binding_lines, modules) -> dict | None:
    try:
        return fusion.analyse(generated, binding_lines, modules)
    except Exception as e:  # noqa: BLE001 - the map is a view; it must never break a compile
        if debug_enabled():
            raise
        cache.warn(f"babytriton: could not build the fusion map of '{info.name}' "
                   f"({type(e).__name__}: {e}); k.fusion will be empty")
        return None
