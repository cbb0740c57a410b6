# Chapter 20 - CPU and GPU in one function: `with device(...)`
#
# Exercise 7 of the tutorial, solved on chapter 13 alone: this file holds that
# answer and nothing else. exercises/20_devices.py is the same file with the answer
# taken out; `diff exercises/20_devices.py chapters/20_devices.py` shows it.
#
# What: inside a jitted function, `with device("gpu"):` runs the block's
# operations on the GPU, and everything else runs on the CPU, where the
# arguments come from and where the results go back to. One Relax function
# holds both parts; the compiler inserts the copies between the devices,
# compiles the CPU kernels with LLVM and the GPU ones to CUDA, and one Relax
# VM with both devices runs the whole function.
#
# Why: some work belongs on the host (small, branchy, or where the data
# already is), some on the GPU (large and parallel). Moving data by hand is
# easy to get wrong; here the copies follow from the blocks.
#
# How, in Relax terms: the module declares two *virtual devices*
# (`I.module_global_infos({"vdevice": [cpu, gpu]})`), and every tensor's type
# can say where it lives: `R.Tensor((16, 8), "float32", vdevice="llvm:0")`.
# The parameters are declared on the CPU. When an operation inside a GPU
# block uses a tensor that lives on the CPU, the code generator first emits
# `R.to_vdevice(x, "cuda:0")`, a copy (once per value and device), and the
# operation's result then lives on the GPU too: the pass RealizeVDevice
# propagates the devices through the function. LegalizeOps gives each TIR
# function the target of its device (`multiply_llvm`, `tir_exp_cuda`), and
# FuseOps fuses each device's operations separately. FuseTIR forgets the
# target of the functions it creates, so `retarget` puts it back, read from
# the device of each call's result. Dlight schedules only the CUDA kernels,
# and `tvm.compile` builds each kernel for its own target.
#
# Chapter 11's rule about GPUs holds: building needs no GPU, running does.
# Without one, the chapter builds and prints both halves of the code.
#
# What to look at: `vdevice="llvm:0:global"` and `vdevice="cuda:0:global"`
# on every value of the Relax function; the copies `x_gpu`, `w_gpu` going in
# and `h_cpu` coming back (printed on its own, a function shows its devices
# as `llvm:-1`: the index is only known in the module); after fusion the
# kernels ending in `_llvm` and `_cuda`; then the entry points of the LLVM
# module and the `__global__` CUDA kernel, from one build.
#
# Run: python chapters/20_devices.py
import ast
import importlib
import inspect
import re

import torch
import tvm
from tvm import relax as rx
from tvm.script import relax as R
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor
ch11 = ch13.ch12.ch11
DEVICES = ("cpu", "gpu")


class device:  # noqa: N801 - written like torch.device
    """`with device("cpu" | "gpu"):` in a jitted function: where the block's operations run."""

    def __init__(self, name):
        if name not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, not {name!r}")
        self.name = name

    def __enter__(self):
        raise RuntimeError("`with device(...)` only means something inside a jitted function")

    def __exit__(self, *exc):
        return False


def uses_devices(tree):
    return any(isinstance(node, ast.With) for node in ast.walk(tree))


def vdevice_targets():
    """The two devices' targets: the GPU's knows the CPU as its host, which launches its kernels."""
    cpu = tvm.target.Target("llvm")
    gpu = tvm.target.Target.from_device(tvm.cuda()) if ch11.has_gpu() else \
        tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    return {"cpu": cpu, "gpu": tvm.target.Target(gpu, host=cpu)}


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def __init__(self, fn):
        super().__init__(fn)
        self.vdevices = None  # name -> rx.VDevice, in functions with device blocks
        self.where = "cpu"    # the device of the code being compiled
        self.copies = {}      # (value, device) -> its copy

    def visit_Module(self, node):
        if not uses_devices(node):
            return super().visit_Module(node)
        self.vdevices = {name: rx.VDevice(target, 0, "global") for name, target in vdevice_targets().items()}
        with IRBuilder() as ib:
            with I.ir_module():
                I.module_global_infos({"vdevice": list(self.vdevices.values())})
                for stmt in node.body:
                    self.visit(stmt)
        return ib.get()

    def visit_arguments(self, node):
        if self.vdevices is None:
            return super().visit_arguments(node)
        annotations = inspect.get_annotations(self.fn, eval_str=True)
        for arg in node.args:
            ann = annotations.get(arg.arg)
            if not isinstance(ann, Tensor):
                raise self.error(arg, f"parameter {arg.arg!r} needs a Tensor annotation")
            ty = R.Tensor(ann.shape, ann.dtype, vdevice=self.vdevices["cpu"])  # arguments come from the CPU
            self.symbols[arg.arg] = RB.arg(arg.arg, ty)

    def visit_With(self, node):
        item = node.items[0]
        call = item.context_expr
        if self.vdevices is None or len(node.items) != 1 or item.optional_vars is not None or not (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and self.fn.__globals__.get(call.func.id) is device and len(call.args) == 1):
            raise self.error(node, "the only `with` supported is `with device('cpu' | 'gpu'):`")
        if self.where != "cpu":
            raise self.error(node, "device blocks cannot be nested")
        name = ast.literal_eval(call.args[0])
        if name not in DEVICES:
            raise self.error(call.args[0], f"device must be one of {DEVICES}, not {name!r}")
        self.where = name
        try:
            for stmt in node.body:
                self.visit(stmt)
        finally:
            self.where = "cpu"

    def visit_BinOp(self, node):
        """An operation on the current device: its tensor operands are copied there first."""
        expr = super().visit_BinOp(node)
        if self.vdevices is None:
            return expr
        args = [self.on_device(self.bound(arg), self.where) for arg in expr.args]
        return rx.Call(expr.op, args, expr.attrs, expr.ty_args, expr.span)

    def bound(self, value):
        """A nested operation (`a + b` in `a + b + c`) bound to a variable, so its device is known."""
        return RB.emit(value) if isinstance(value, rx.Call) else value

    def on_device(self, value, where):
        """`value` on device `where`: itself, or a copy (made once, and reused)."""
        vdevice = value.ty.vdevice if isinstance(getattr(value, "ty", None), rx.TensorType) else None
        if vdevice is None or vdevice.target.kind.name == self.vdevices[where].target.kind.name:
            return value  # (VDevice.same_as recurses forever in this TVM: compare the kinds)
        if (value, where) not in self.copies:
            copy = RB.emit(rx.op.to_vdevice(value, self.vdevices[where]))
            if isinstance(value, rx.Var):
                IRBuilder.name(f"{value.name}_{where}", copy)
            self.copies[value, where] = copy
        return self.copies[value, where]

    def visit_Return(self, node):
        if self.vdevices is None or node.value is None:
            return super().visit_Return(node)
        value = self.bound(self.visit(node.value))  # results go back to the CPU
        RB.func_ret_value(self.on_device(value, "cpu"))
        self.returned = True


def retarget(mod):
    """FuseTIR creates kernels without a target: give each the target of the device its result is on."""
    for func in mod.functions.values():
        if not isinstance(func, rx.Function):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                call = binding.value
                if isinstance(call, rx.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
                    kernel = mod[call.args[0]]
                    if kernel.attrs is None or "target" not in kernel.attrs:
                        mod[call.args[0]] = kernel.with_attr("target", call.ty_args[0].vdevice.target)
    return mod


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    @property
    def heterogeneous(self):
        return uses_devices(self.parse())

    def lower(self, mod):
        if "vdevice" not in mod.global_infos:
            return super().lower(mod)
        return retarget(super().lower(rx.transform.RealizeVDevice()(mod)))

    def compile(self):
        if not self.heterogeneous:
            return super().compile()
        mod = self.lower(self.codegen())
        with vdevice_targets()["gpu"]:  # Dlight leaves the kernels whose target is LLVM alone
            mod = ch11.dl.ApplyDefaultSchedule(*self.schedule_rules())(mod)
        self.scheduled = mod
        return self.build(mod)

    def build(self, mod):
        if "vdevice" not in mod.global_infos:
            return super().build(mod)
        return tvm.compile(mod)  # no target: each kernel has its own

    def device(self):
        return [tvm.cpu(), tvm.cuda()] if self.heterogeneous else super().device()

    def sources(self):
        """The generated code by kind: "llvm" (LLVM IR of the CPU kernels), "cuda" (the GPU kernels)."""
        found, stack = {}, [self.executable.mod]
        while stack:
            module = stack.pop()
            if module.kind in ("llvm", "cuda"):
                found[module.kind] = module.inspect_source("ll" if module.kind == "llvm" else "")
            stack.extend(module.imports)
        return found


jit = JIT.decorator


def kernels_called(mod, name):
    """The PrimFuncs a Relax function calls, in order."""
    return [binding.value.args[0].name_hint for block in mod[name].body.blocks for binding in block.bindings
            if isinstance(binding.value, rx.Call) and isinstance(binding.value.op, tvm.ir.Op)
            and binding.value.op.name == "relax.call_tir"]


# ---- Follow-up, beyond the lesson ------------------------------------------------------------
# - Only `+` is placed on a device here, since it is chapter 13's only operation; with chapter 14's
#   operators or chapter 18's library calls, the same placing goes where every operation is emitted.
# - Several results (`return a, b`), and names of one branch (chapter 16) seeing a copy made in the
#   other, need the copy cache to follow the symbol table's frames.
# The package places every operation: babytriton/frontend/devices.py and babytriton/codegen/relax.py.


if __name__ == "__main__":

    @jit
    def features(raw: Tensor((16, 8), "float32"), w: Tensor((16, 8), "float32")):
        x = raw + raw               # outside any block: the CPU
        with device("gpu"):
            h = x + w               # x and w are copied to the GPU
            h = h + h + x
        return h + 1.0              # h is copied back: the add runs on the CPU

    mod = features.codegen()
    print("Relax, as generated:")
    print(mod["features"].script())
    lowered = features.lower(mod)
    kernels = kernels_called(lowered, "features")
    print("\nkernels after fusion, each compiled for its device:", kernels)
    sources = features.sources()
    llvm_functions = sorted(set(re.findall(r"@__tvm_ffi_(\w+)\(", sources["llvm"])))
    cuda_kernels = ch13.ch12.kernel_names(sources["cuda"])
    print("entry points in the LLVM module (the CPU kernels, and the host side that launches each "
          "CUDA kernel):", llvm_functions)
    print("CUDA kernels:", cuda_kernels)
    print(sources["cuda"][sources["cuda"].index('extern "C"'):][:1200], "...")

    raw, w = torch.randn(16, 8), torch.randn(16, 8)
    h = (raw + raw) + w
    expected = h + h + (raw + raw) + 1.0
    if ch11.has_gpu():
        torch.testing.assert_close(features(Tensor.of(raw), Tensor.of(w)), expected, rtol=1e-4, atol=1e-4)
        print(f"\nRan on the CPU and on {torch.cuda.get_device_name()}; matches torch.")
    else:
        print("\nNo CUDA GPU here: built for the CPU and sm_90, not run.")

    print("Checking: copies in and out, kernels for both devices, one executable holding both")
    script = mod.script()
    assert 'vdevice="cuda:0:global"' in script and 'vdevice="llvm:0:global"' in script
    assert all(f"{name}: R.Tensor" in script for name in ("x_gpu", "w_gpu", "h_cpu"))
    assert any(k.endswith("_llvm") for k in kernels) and any(k.endswith("_cuda") for k in kernels)
    assert any(f.endswith("_llvm") for f in llvm_functions) and any(f.endswith("_cuda") for f in llvm_functions)
    assert all(k.endswith("_cuda_kernel") for k in cuda_kernels)
