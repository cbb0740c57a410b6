"""The Relax backend: code generation to a Relax IRModule, the pipeline of passes and schedules, and
tvm.compile to a Relax VM executable. Its build is a `runtime.Compiled`, as the TIR backend's.

Stages: "python", "ast" (recorded by the driver), "relax", one per pass of the pipeline, "source".
A backward (`build_backward`) records "relax" (the forward), "backward" (its vector-Jacobian product,
made by backward.py) and then the same pipeline's stages.
"""
from __future__ import annotations

import ast
import gc

import tvm
from tvm import relax

from ..autodiff import backward
from ..runtime import cache, fusion
from ..lowering import pipeline
from .. import schedules
from ..frontend.arguments import ArgSpec
from ..codegen import kernels, mutation
from ..codegen.relax import RelaxCodeGen, quiet_tvm
from ..core.errors import CompilationError, debug_enabled
from ..frontend.function import FunctionInfo
from ..runtime.kernel import Compiled


def build(info: FunctionInfo, specs: tuple[ArgSpec, ...], record, stages: dict) -> Compiled:
    """Compile one version: code generation, the pipeline's passes and schedules, tvm.compile. A TVM
    failure is reported at the expression whose op fails alone, if one does, else at the `def`."""
    codegen, generated = _generate(info, specs, record)
    compiled = _lower_and_build(info, codegen, generated, generated, record, stages, codegen.binding_lines)
    return mutation.with_outputs(compiled, codegen)  # the parameters it updates in place (written back)


class NothingSaved(Exception):
    """A saving backward (or training forward) was asked for, but no forward value is small enough."""


def build_backward(info: FunctionInfo, specs: tuple[ArgSpec, ...], requires: tuple[bool, ...],
                   outputs: tuple[bool, ...], record, stages: dict, part: str | None = None) -> Compiled:
    """Compile the backward of one version: `<name>_backward(params..., grads of the `outputs` that
    are differentiated)` returns the gradients of the parameters in `requires`. Raises
    backward.NotDifferentiable (with the binding at fault) where Gradient cannot go. With `part`
    "backward", the backward taking the saved small forward values (params..., saved..., grads...);
    with "forward", the training forward `<name>_forward_saving` returning (result, (saved...));
    NothingSaved when no value is saved (calls use the forward and the recomputing backward)."""
    codegen, generated = _generate(info, specs, record)
    try:
        mod = backward.vjp_module(generated, info.name, requires, outputs, _kernel_gradients(codegen),
                                  save=part is not None, device_kind=info.codegen_options.device_kind)
    except backward.NotDifferentiable as e:
        e.node = codegen.binding_nodes.get(e.var)
        if e.kernel is not None:   # the user's PrimFunc behind the module's specialised copy
            e.kernel = next((d.kernel for d in codegen.kernels if d.gvar.same_as(e.kernel)), None)
        raise
    except CompilationError:   # a @bt.grad_for function's own mistake
        raise
    except Exception:  # noqa: BLE001 - TVM's Gradient failing on a construct: torch autograd instead
        if debug_enabled():
            raise
        failed = backward.NotDifferentiable(None, "TVM's Gradient pass failing on it "
                                                  "(BABYTRITON_DEBUG=1 shows why)")
        failed.node = info.parsed.tree
    else:
        failed = None
    if failed is not None:   # raised outside the `except`: TVM's error is not chained to it
        raise failed
    if part is not None:
        training = f"{info.name}_forward_saving"
        if training not in [gv.name_hint for gv in mod.functions]:
            raise NothingSaved(info.name)
        drop = f"{info.name}_backward" if part == "forward" else training
        mod = relax.transform.DeadCodeElimination([training if part == "forward" else f"{info.name}_backward"])(
            tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != drop},
                         attrs=mod.attrs, global_infos=mod.global_infos))
    record("training forward" if part == "forward" else "backward", mod.script())
    return _lower_and_build(info, codegen, generated, mod, record, stages,
                            backward.lines(mod, codegen.binding_lines), "the backward of ", part == "forward")


def _kernel_gradients(codegen):
    """For backward.vjp_module: the Relax function of the @bt.grad_for gradient of a kernel the code
    calls, for the call's types, or None: no gradient, or one that is not straight-line code calling
    no kernel (that one runs through the eager reference instead)."""
    made: dict = {}

    def find(gvar, call):
        key = gvar.name_hint
        if key not in made:
            made[key] = None
            kernel = next((d.kernel for d in codegen.kernels if d.gvar.same_as(gvar)), None)
            grad = kernels.gradient_of(kernel) if kernel is not None else None
            if grad is not None:
                made[key] = _gradient_module(grad, call)
        return made[key]
    return find


def _gradient_module(grad, call):
    inputs = [a.ty for a in call.args[1].fields]
    outs = list(call.ty_args[0].fields) if isinstance(call.ty_args[0], relax.TupleType) else [call.ty_args[0]]
    types = inputs + [t for t in outs if t.dtype in ("float16", "bfloat16", "float32", "float64")]
    if len(types) != len(grad.params) or any(p.kind != "tensor" and p.kind != "auto" for p in grad.params):
        return None   # the eager route reports the mismatch where torch calls it
    specs = [ArgSpec("tensor", tuple(int(d) for d in t.shape), t.dtype) for t in types]
    try:
        generated = RelaxCodeGen(grad.info.parsed, dict(zip((p.name for p in grad.params), specs)),
                                 grad.info.codegen_options).build()
    except Exception:  # noqa: BLE001 - reported by the eager route, at the gradient function's line
        return None
    fn = generated[grad.info.name]
    floats = [t for t in inputs if t.dtype in ("float16", "bfloat16", "float32", "float64")]
    ret = list(fn.ret_ty.fields) if isinstance(fn.ret_ty, relax.TupleType) else [fn.ret_ty]
    kernel = call.args[0].name_hint
    if len(ret) != len(floats):
        raise grad.info.parsed.source_map.error(
            grad.info.parsed.tree, f"the @bt.grad_for function '{grad.__name__}' of kernel `{kernel}` returns "
                                   f"{len(ret)} gradient(s); the kernel has {len(floats)} floating-point input(s)")
    for i, (got, want) in enumerate(zip(ret, floats)):
        if not isinstance(got, relax.TensorType) or got.dtype != want.dtype or \
                [int(d) for d in got.shape] != [int(d) for d in want.shape]:
            shape = tuple(int(d) for d in want.shape)
            raise grad.info.parsed.source_map.error(
                grad.info.parsed.tree, f"the @bt.grad_for function '{grad.__name__}' of kernel `{kernel}` returns "
                                       f"{got} as gradient {i + 1}, but that input is a {want.dtype} tensor of shape "
                                       f"{shape}")
    straight = len(generated.functions) == 1 and not any(isinstance(b.value, relax.If)
                                                         for block in fn.body.blocks for b in block.bindings)
    return fn if straight else None   # else (loops, kernels) it runs through the eager reference


def _generate(info: FunctionInfo, specs, record):
    if info.options["schedule"] == "meta_schedule":  # before compiling: say which extra to install
        schedules.require_tuning_extras()
    named = dict(zip((p.name for p in info.params), specs))
    codegen = RelaxCodeGen(info.parsed, named, info.codegen_options)
    generated = codegen.build()
    record("relax", generated.script())
    return codegen, generated


def _lower_and_build(info: FunctionInfo, codegen, generated, mod, record, stages: dict, binding_lines: dict,
                     what: str = "", side_outputs: bool = False) -> Compiled:
    """`mod` (the generated module, or a backward made from it) through the pipeline and tvm.compile."""
    options = info.options
    before = mod
    target = info.target
    stage = "passes"
    modules: dict[str, tvm.IRModule] = {}
    failed = None
    with quiet_tvm():
        try:
            mod = pipeline.lower(mod, target, options["schedule"], record, options["trials"], modules, side_outputs)
            stage = "build"
            executable = pipeline.build(mod, target)
        except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
            during = f"during {stage} after {list(stages)[-1]}"
            located = _failing_kernel(info, codegen, before, binding_lines, modules, what, during)
            if located is not None:
                node, message = located
            else:
                var = pipeline.failing_binding(generated, target, options["schedule"], options["trials"])
                node = codegen.binding_nodes.get(var, info.parsed.tree) if var is not None else info.parsed.tree
                message = f"TVM failed to compile {what}'{info.name}' ({during})" if node is info.parsed.tree else \
                    f"could not compile `{ast.unparse(node)}`: the compiler failed on it ({during})"
            if debug_enabled():
                raise info.parsed.source_map.error(node, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
            failed = (node, message + "; set BABYTRITON_DEBUG=1 to see the cause")
        if failed:  # TVM's objects in the failed passes are freed here, their warnings silenced
            gc.collect()
    if failed:
        raise info.parsed.source_map.error(*failed)
    record("source", pipeline.generated_source(executable, target, both="vdevice" in mod.global_infos))
    return Compiled("relax", executable, mod, stages, _fusion_record(info, before, binding_lines, modules),
                    tuple(codegen.size_checks))


def _failing_kernel(info: FunctionInfo, codegen, before, binding_lines, modules, what: str, during: str):
    """A failure past fusion located at a kernel: (the user's expression it computes, a message
    naming the kernel), or None where no kernel fails on its own (pipeline.failing_kernel)."""
    if "FuseTIR" not in modules:
        return None
    kernel = pipeline.failing_kernel(modules["FuseTIR"], info.target, info.options["schedule"], info.options["trials"])
    if kernel is None:
        return None
    try:
        node = _kernel_node(codegen, fusion.analyse(before, binding_lines, modules), kernel)
    except Exception:  # noqa: BLE001 - locating is a courtesy: the message still names the kernel
        node = None
    device = "the GPU" if info.target.kind.name == "cuda" else "the CPU"
    computes = f" (it computes `{ast.unparse(node)}`)" if node is not None else ""
    return node or info.parsed.tree, (f"could not build kernel `{kernel}` of {what}'{info.name}' for {device}"
                                      f"{computes}: the compiler failed on it ({during})")


def _kernel_node(codegen, record: dict | None, kernel: str):
    """The user's expression a kernel's result comes from: the one of its last op (by the fusion
    record), or the widest expression on that op's line."""
    entry = next((k for k in record["kernels"] if k["name"] == kernel), None) if record else None
    ops = [record["ops"][i] for i in entry["ops"] if record["ops"][i]["line"] is not None] if entry else []
    if not ops:
        return None
    last = ops[-1]
    on_line = [(var, node) for var, node in codegen.binding_nodes.items()
               if codegen.binding_lines.get(var) == last["line"]]
    named = [node for var, node in on_line if var.name == last["var"]]
    widest = lambda node: (node.end_lineno - node.lineno, node.end_col_offset - node.col_offset)  # noqa: E731
    return named[0] if named else max((node for _, node in on_line), key=widest, default=None)


def _fusion_record(info: FunctionInfo, generated, binding_lines, modules) -> dict | None:
    try:
        return fusion.analyse(generated, binding_lines, modules)
    except Exception as e:  # noqa: BLE001 - the map is a view; it must never break a compile
        if debug_enabled():
            raise
        cache.warn(f"babytriton: could not build the fusion map of '{info.name}' "
                   f"({type(e).__name__}: {e}); k.fusion will be empty")
        return None
