"""`with bt.device(...)` blocks: one @jit function whose operations run on the CPU and the GPU.

Each block's operations run on its device (a Relax virtual device, "vdevice"); the compiler inserts
`R.to_vdevice` copies wherever a value is used on a device it does not live on.
"""
from __future__ import annotations

import ast
import dataclasses

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import relax as RB

from ..core import targets
from .arguments import ArgSpec, unwrap
from ..core.errors import CompilationError, Diagnostic, SourceMap
from ..core.types import Param, Tensor

# User spelling -> the device it means ("cpu" runs LLVM code, "cuda" CUDA kernels).
DEVICE_NAMES = {"cpu": "cpu", "llvm": "cpu", "gpu": "cuda", "cuda": "cuda"}
_SHOWN = {"cpu": "cpu", "cuda": "gpu"}   # suffix of the copies' names in the IR


def _normalise(name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"bt.device() takes a device name ('cpu' or 'gpu'), got {type(name).__name__} {name!r}")
    if name not in DEVICE_NAMES:
        raise ValueError(f"unknown device {name!r}; use 'cpu' (or 'llvm') or 'gpu' (or 'cuda')")
    return DEVICE_NAMES[name]


class device:  # noqa: N801 - used as `with bt.device("gpu"):`, like torch.device
    """`with bt.device("cpu"|"gpu"):` inside a @jit function: the block's operations run on that device.

    Where values live:
    - Operations outside any block run on the function's target device.
    - A tensor argument stays where the caller put it (a CPU or a CUDA tensor; the compiled version
      is specific to that placement); the compiler copies it to a block's device when the block uses it.
    - The copies between devices are inserted by the compiler, once per value and device.
    - Results: a `return` inside a block gives back tensors on that block's device. A `return` outside
      every block gives each returned variable back on the device of the block holding its last
      assignment, and anything else (a variable assigned outside every block, a parameter, an expression
      computed in the `return`) on the target's device.

    Blocks cannot be nested. Outside a @jit function, entering a block is an error: it has no meaning
    for ordinary Python code.
    """

    def __init__(self, name: str):
        self.kind = _normalise(name)
        self.name = name

    def __enter__(self):
        raise RuntimeError(f"`with bt.device({self.name!r}):` only has a meaning inside a @jit function, "
                           "where it places the block's operations on that device")

    def __exit__(self, *exc):
        return False

    def __repr__(self):
        return f"bt.device({self.name!r})"


def uses_device_blocks(tree: ast.FunctionDef) -> bool:
    """Whether a function body has `with` blocks (the only `with` that @jit code accepts is bt.device)."""
    return any(isinstance(node, ast.With) for node in ast.walk(tree))


def argument_device(param: Param, value, fname: str) -> str:
    """Where a tensor argument lives: "cpu" or "cuda:<index>"."""
    data = unwrap(value)
    if isinstance(data, np.ndarray):
        return "cpu"
    if isinstance(data, torch.Tensor) and data.device.type in ("cpu", "cuda"):
        return "cpu" if data.device.type == "cpu" else str(data.device)   # a CUDA tensor's has its index
    raise TypeError(f"{fname}(): parameter '{param.name}' is on {data.device}; "
                    "functions with device blocks take CPU or CUDA tensors")


def _current_gpu() -> str:
    """torch's current GPU (a rank's own, once it called torch.cuda.set_device), cuda:0 without one."""
    return f"cuda:{torch.cuda.current_device() if torch.cuda.is_available() else 0}"


def with_devices(params: list[Param], specs: tuple[ArgSpec, ...], args, fname: str,
                 default: str) -> tuple[ArgSpec, ...]:
    """The argument descriptions with each tensor's device, part of the compiled version's key.

    Runtime scalars are made on the CPU. Without `args` (compiling from the annotations alone),
    tensors are taken to be on the `default` device ("cpu", or "cuda": torch's current GPU)."""
    placed = []
    gpus = {}
    for position, (param, spec) in enumerate(zip(params, specs)):
        if spec.kind == "tensor":
            where = argument_device(param, args[position], fname) if args is not None else \
                _current_gpu() if default == "cuda" else "cpu"
            if where.startswith("cuda"):
                gpus.setdefault(where, param.name)
            spec = dataclasses.replace(spec, device=where)
        elif spec.kind == "scalar":
            spec = dataclasses.replace(spec, device="cpu")
        placed.append(spec)
    if len(gpus) > 1:
        (first, a), (second, b) = list(gpus.items())[:2]
        raise TypeError(f"{fname}(): parameter '{a}' is on {first} but '{b}' is on {second}; "
                        "a function runs on one GPU")
    return tuple(placed)


def check_devices(params: list[Param], args, device_kind: str, fname: str) -> None:
    """A gpu function needs CUDA tensors, all on one GPU (any one: each GPU loads the compiled code
    for itself), and a cpu function CPU tensors (no silent copies)."""
    gpus = {}
    for param, value in zip(params, args):
        data = value.data if isinstance(value, Tensor) else value
        if isinstance(data, np.ndarray):
            on = "cpu"
        elif isinstance(data, torch.Tensor):
            on = "cuda" if data.is_cuda else data.device.type
        else:
            continue
        if on != device_kind:
            fix = ".cuda()" if device_kind == "cuda" else ".cpu()"
            where = "a numpy array (host memory)" if isinstance(data, np.ndarray) else f"on {data.device}"
            raise TypeError(f"{fname}(): parameter '{param.name}' is {where}, but this function runs on "
                            f"{'the GPU' if device_kind == 'cuda' else 'the CPU'}; move it with `{fix}`")
        if on == "cuda":
            gpus.setdefault(str(data.device), param.name)
    if len(gpus) > 1:
        (first, a), (second, b) = list(gpus.items())[:2]
        raise TypeError(f"{fname}(): parameter '{a}' is on {first} but '{b}' is on {second}; a call runs on "
                        f"one GPU: move them to one device (e.g. `{b}.to('{first}')`)")


def vm_devices(module: tvm.IRModule) -> list | None:
    """The Relax VM's devices for a module with vdevices, in the module's vdevice order; None without."""
    if module is None or "vdevice" not in module.global_infos:
        return None
    return [tvm.device(v.target.get_target_device_type(), v.vdevice_id) for v in module.global_infos["vdevice"]]


class Placement:
    """While compiling a function with device blocks: each device's vdevice, the block being compiled,
    the copies made so far, and the device where each variable was last assigned."""

    def __init__(self, target_option, specs: dict[str, ArgSpec], scope, source_map: SourceMap):
        target = targets.resolve_target(target_option)
        self.default = targets.device_kind(target)   # the device of code outside every block
        self._target = target
        self._gpu_index = next((int(s.device.split(":")[1]) for s in specs.values()
                                if s.device.startswith("cuda:")), 0)
        self._vdevices: dict[str, relax.VDevice] = {}
        self.scope = scope
        self.source_map = source_map     # the function's lines in its file, for messages
        self.block: tuple[str, ast.With] | None = None   # (device, node) of the block being compiled
        self.home: dict[str, str | None] = {}            # variable -> device of its last assignment's block
        self._copies: dict = {}

    # -- devices ----------------------------------------------------------------------------------
    @property
    def current(self) -> str:
        return self.block[0] if self.block else self.default

    def vdevice(self, kind: str) -> relax.VDevice:
        if kind not in self._vdevices:
            if kind == "cpu":
                cpu = self._target if self.default == "cpu" else (
                    self._target.host or targets.resolve_target("cpu"))
                self._vdevices[kind] = relax.VDevice(cpu, 0, "global")
            else:
                cuda = self._target if self.default == "cuda" else targets.resolve_target("gpu")
                host = self.vdevice("cpu").target
                self._vdevices[kind] = relax.VDevice(tvm.target.Target(cuda, host=host), self._gpu_index,
                                                     "global")
        return self._vdevices[kind]

    def used(self) -> list[relax.VDevice]:
        """The vdevices in the module, the CPU first: values with no annotation (constants) live there."""
        return [self._vdevices[k] for k in ("cpu", "cuda") if k in self._vdevices]

    def param_vdevice(self, spec: ArgSpec) -> relax.VDevice:
        """A parameter lives where the caller's argument is (a scalar: on the CPU)."""
        return self.vdevice("cuda" if spec.device.startswith("cuda") else spec.device or self.default)

    @staticmethod
    def device_of(value) -> str | None:
        vdev = value.ty.vdevice if isinstance(value.ty, relax.TensorType) else None
        return None if vdev is None else "cuda" if vdev.target.kind.name == "cuda" else "cpu"

    # -- blocks -----------------------------------------------------------------------------------
    def enter(self, kind: str, node: ast.With):
        if self.block is not None:
            outer_kind, outer = self.block
            raise Diagnostic(f"device blocks cannot be nested: this one is inside "
                             f"`with bt.device({_SHOWN[outer_kind]!r})` on line {self.source_map.file_line(outer.lineno)}")
        self.block = (kind, node)

    def leave(self):
        self.block = None

    def assigned(self, name: str) -> None:
        self.home[name] = self.block[0] if self.block else None

    # -- operations -------------------------------------------------------------------------------
    def place_call(self, call: relax.Call, emit) -> relax.Call:
        """The call with every tensor operand on the current device (copies emitted as needed)."""
        args = [self._operand(a, emit) for a in call.args]
        if all(a.same_as(b) for a, b in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    def _operand(self, arg, emit):
        if isinstance(arg, relax.Call):   # a nested operation: compile it first, on this device
            return emit(arg)
        if isinstance(arg, relax.Tuple):
            fields = [self._operand(f, emit) for f in arg.fields]
            return arg if all(a.same_as(b) for a, b in zip(fields, arg.fields)) else relax.Tuple(fields)
        if isinstance(arg, relax.Expr) and isinstance(getattr(arg, "ty", None), relax.TensorType):
            where = self.device_of(arg)
            if where is not None and where != self.current:
                return self.copy(arg, self.current)
        return arg

    def settle(self, var):
        """A result with no device (made from constants alone) inside a GPU block is put on the GPU."""
        if isinstance(var.ty, relax.TensorType) and var.ty.vdevice is None and self.current != "cpu":
            return self.copy(var, self.current)
        return var

    def copy(self, value, kind: str):
        """`value` on device `kind`: an existing copy when one is visible here, else a new one."""
        key = (value, kind)
        depth = len(self.scope.frames)
        if key in self._copies:
            copy, level, frame = self._copies[key]
            if level <= depth and self.scope.frames[level - 1] is frame:
                return copy
        copy = RB.emit(relax.op.to_vdevice(value, self.vdevice(kind)))
        if isinstance(value, relax.Var):
            IRBuilder.name(f"{value.name}_{_SHOWN[kind]}", copy)
        self._copies[key] = (copy, depth, self.scope.frames[-1])
        return copy

    def result(self, node: ast.expr | None, value, to_expr):
        """A returned value on the device the rule in `device`'s docstring gives it."""
        if isinstance(value, tuple) and isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.result(n, v, to_expr) for n, v in zip(node.elts, value))
        if self.block is not None:
            want = self.current
        elif isinstance(node, ast.Name) and node.id in self.home:
            want = self.home[node.id] or self.default
        else:
            want = self.default
        if isinstance(value, (bool, int, float)):
            value = to_expr(value)
        if isinstance(value, relax.Expr) and isinstance(value.ty, relax.TensorType):
            if (self.device_of(value) or "cpu") != want:
                return self.copy(value, want)
        return value


def block_device(node: ast.With, evaluate, error) -> str:
    """Check that a `with` statement is `with bt.device(<name>):` and return the device it names.

    `evaluate(expr)` compiles an expression to its compile-time value; `error(node, message)` makes
    the CompilationError pointing at a node."""
    item = node.items[0]
    if len(node.items) != 1:
        raise error(node.items[1].context_expr, "a `with` statement in a @jit function takes one `bt.device(...)`")
    call = item.context_expr
    try:
        func = evaluate(call.func) if isinstance(call, ast.Call) else None
    except CompilationError:  # e.g. `with open(...)`: a name @jit code does not know
        func = None
    if func is not device:
        raise error(call, "only `with bt.device(...)` blocks are supported in @jit functions")
    if item.optional_vars is not None:
        raise error(item.optional_vars, "`with bt.device(...)` names no value: drop the `as ...`")
    if call.keywords or len(call.args) != 1:
        raise error(call, "bt.device() takes one device name, e.g. bt.device('gpu')")
    name = evaluate(call.args[0])
    try:
        return _normalise(name)
    except (TypeError, ValueError) as e:
        raise error(call.args[0], str(e)) from None
