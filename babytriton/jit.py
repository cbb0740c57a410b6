"""`@jit`: the decorator, the in-memory cache of compiled versions, and the call path."""
from __future__ import annotations

import ast
import difflib
import inspect
import threading
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relax

from . import devices, pipeline
from .codegen.relax import RelaxCodeGen
from .codegen.source import parse_function
from .errors import CompilationError, debug_enabled
from .types import (DTYPES, ArgSpec, Param, Tensor, arg_spec, check_symbolic_sizes, numpy_to_vm,
                    params_from_signature, static_spec, torch_to_vm)

OPTIONS = {"target": "cpu", "schedule": "dlight", "unroll": 16, "verbose": False, "backend": "relax",
           "cache": True, "trials": 16}
BACKENDS = ("relax", "tir")
# Exact argument signatures remembered per function before the table is reset (symbolic shapes
# can produce one per distinct size).
MAX_RUNNERS = 4096


def jit(fn=None, /, **options):
    """Compile a Python tensor function with TVM: `@jit` or `@jit(target="gpu", ...)`."""
    check_options(options)
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)


def check_options(options: dict) -> None:
    for key in options:
        if key not in OPTIONS:
            hint = difflib.get_close_matches(key, OPTIONS, n=1)
            raise TypeError(f"jit() got an unknown option {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                            + f" (options: {', '.join(OPTIONS)})")
    merged = {**OPTIONS, **options}
    pipeline.check_target(merged["target"])
    if merged["schedule"] not in pipeline.SCHEDULES:
        raise ValueError(f"unknown schedule {merged['schedule']!r}; use one of {', '.join(pipeline.SCHEDULES)}")
    if merged["backend"] not in BACKENDS:
        raise ValueError(f"unknown backend {merged['backend']!r}; use one of {', '.join(BACKENDS)}")
    for count in ("unroll", "trials"):
        value = merged[count]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{count} is a non-negative int, got {value!r}")
    for flag in ("verbose", "cache"):
        if not isinstance(merged[flag], bool):
            raise TypeError(f"{flag} is True or False, got {merged[flag]!r}")


class Kernel:
    """One compiled version of a @jit function: callable, with the IR of every stage."""

    def __init__(self, name: str, params: list[Param], specs: tuple[ArgSpec, ...], target, executable,
                 module: tvm.IRModule, stages: dict[str, str]):
        self.name = name
        self.params = params
        self.specs = specs
        self.target = target
        self.executable = executable
        self.module = module
        self.stages = stages
        self.device_kind = pipeline.device_kind(target)
        self._vms: dict[int, Any] = {}
        # With device blocks: the VM's devices (CPU and GPU); the arguments may be on either.
        self.vm_devices = devices.vm_devices(module)

    @property
    def source(self) -> str:
        """The generated code: CUDA kernels for a GPU target, LLVM IR for a CPU one."""
        return self.stages["source"]

    def vm_function(self, device_index: int):
        if device_index not in self._vms:
            device = tvm.cuda(device_index) if self.device_kind == "cuda" else tvm.cpu()
            self._vms[device_index] = relax.VirtualMachine(self.executable, self.vm_devices or device)[self.name]
        return self._vms[device_index]

    def runner(self, args: tuple):
        """A fast call for arguments of exactly these types: convert, run, wrap."""
        device_index = 0
        converters = []
        all_numpy = True
        for position, (spec, value) in enumerate(zip(self.specs, args)):
            if spec.kind == "constexpr":
                continue
            if spec.kind == "scalar":
                converters.append((position, _scalar_converter(spec.dtype, spec.device or self.device_kind)))
                continue
            data = value.data if isinstance(value, Tensor) else value
            if isinstance(data, np.ndarray):
                convert = numpy_to_vm
            else:
                all_numpy = False
                convert = torch_to_vm
                if data.is_cuda:
                    device_index = data.device.index or 0
            converters.append((position, convert if not isinstance(value, Tensor) else _via_data(convert)))
        has_tensor = any(s.kind == "tensor" for s in self.specs)
        wrap = _to_numpy if all_numpy and has_tensor else _to_torch
        fn = self.vm_function(device_index)
        converters = tuple(converters)

        def run(args):
            return wrap(fn(*[convert(args[i]) for i, convert in converters]))
        return run

    def __call__(self, *args):
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}() takes {len(self.params)} arguments, got {len(args)}")
        specs = tuple(arg_spec(p, a, self.name) for p, a in zip(self.params, args))
        if self.vm_devices is not None:
            specs = devices.with_devices(self.params, specs, args, self.name, self.device_kind)
        if specs != self.specs:
            raise TypeError(f"{self.name}(): these arguments need another compiled version "
                            "(call the @jit function itself to get one)")
        if self.vm_devices is None:
            check_devices(self.params, args, self.device_kind, self.name)
        check_symbolic_sizes(self.params, list(args), self.name)
        return self.runner(args)(args)

    def __repr__(self):
        return f"<babytriton.Kernel {self.name} for {self.target.kind.name}, stages: {', '.join(self.stages)}>"


def _via_data(convert):
    return lambda value: convert(value.data)


def _scalar_converter(dtype: str, device_kind: str):
    torch_dtype, device = DTYPES[dtype], torch.device(device_kind)
    return lambda value: torch_to_vm(torch.tensor(value, dtype=torch_dtype, device=device))


def _to_torch(out):
    if isinstance(out, tvm.runtime.Tensor):
        return torch.from_dlpack(out)
    if len(out) == 0:
        return None
    return tuple(_to_torch(o) for o in out)


def _to_numpy(out):
    if isinstance(out, tvm.runtime.Tensor):
        return out.numpy()
    if len(out) == 0:
        return None
    return tuple(_to_numpy(o) for o in out)


def check_devices(params: list[Param], args, device_kind: str, fname: str) -> None:
    """A gpu function needs CUDA tensors and a cpu function CPU tensors (no silent copies)."""
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


class JITFunction:
    """A Python function taken over by the compiler; calling it compiles (once per key) and runs."""

    def __init__(self, fn, **options):
        check_options(options)
        self.options = {**OPTIONS, **options}
        self.fn = fn
        self.parsed = parse_function(fn)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        try:  # `from __future__ import annotations` makes every annotation a string
            self.signature = inspect.signature(fn, eval_str=True)
        except Exception:  # noqa: BLE001 - a name only the closure knows: reported per parameter below
            self.signature = inspect.signature(fn)
        self.params = params_from_signature(self.signature, self._param_error)
        self._nparams = len(self.params)
        self._constexpr = tuple(p.kind == "constexpr" for p in self.params)
        self.heterogeneous = devices.uses_device_blocks(self.parsed.tree)   # `with bt.device(...)` blocks
        self._runners: dict[tuple, Any] = {}
        self._kernels: dict[tuple, Kernel] = {}
        self._lock = threading.RLock()
        self._target = None
        self.stats = {"compilations": 0, "hits": 0, "misses": 0}

    # -- errors -------------------------------------------------------------------------------
    def _param_error(self, name: str, message: str) -> CompilationError:
        node = next((a for a in ast.walk(self.parsed.tree.args) if isinstance(a, ast.arg) and a.arg == name),
                    self.parsed.tree)
        return self.parsed.source_map.error(node, message)

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        key = self._call_key(args)
        try:
            run = self._runners[key]
        except KeyError:
            run = self._prepare(args, key)
        except TypeError:  # an unhashable argument: _prepare explains which
            run = self._prepare(args, None)
        return run(args)

    def _call_key(self, args) -> tuple:
        key = []
        for value, is_constexpr in zip(args, self._constexpr):
            kind = type(value)
            if kind is torch.Tensor or isinstance(value, torch.Tensor):
                key.append((value.dtype, value.shape, value.device))
            elif is_constexpr:
                key.append((kind, value))
            elif kind is np.ndarray:
                key.append((value.dtype, value.shape))
            elif kind is Tensor:
                data = value.data
                key.append((kind, type(data), getattr(data, "dtype", None), getattr(data, "shape", None),
                            getattr(data, "device", None)))
            else:
                key.append(kind)
        return tuple(key)

    def _bind(self, args, kwargs) -> tuple:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            names = ", ".join(p.name for p in self.params)
            raise TypeError(f"{self.__name__}({names}): {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _prepare(self, args, key):
        """First call with these exact argument types: check them, find or compile, make a runner."""
        specs = self._specs(args)
        if not self.heterogeneous:  # device blocks take arguments from either device
            check_devices(self.params, args, pipeline.device_kind(self.target()), self.__name__)
        run = self._kernel(specs).runner(args)
        if key is not None:
            with self._lock:
                if len(self._runners) >= MAX_RUNNERS:
                    self._runners.clear()
                self._runners[key] = run
        return run

    def _specs(self, args) -> tuple[ArgSpec, ...]:
        specs = tuple(arg_spec(p, a, self.__name__) for p, a in zip(self.params, args))
        check_symbolic_sizes(self.params, list(args), self.__name__)
        if self.heterogeneous:
            specs = devices.with_devices(self.params, specs, args, self.__name__, self._device_kind())
        return specs

    def _device_kind(self) -> str:
        return pipeline.device_kind(self.target())

    # -- compiling ----------------------------------------------------------------------------
    def compile(self, *args, **kwargs) -> Kernel:
        """The compiled version for these arguments; with none, for the annotations alone."""
        if not args and not kwargs and self.params:
            specs = tuple(static_spec(p) if p.kind != "constexpr" or p.default is inspect.Parameter.empty
                          else ArgSpec("constexpr", value=p.default) for p in self.params)
            if self.heterogeneous:
                specs = devices.with_devices(self.params, specs, None, self.__name__, self._device_kind())
        else:
            if kwargs or len(args) != self._nparams:
                args = self._bind(args, kwargs)
            specs = self._specs(args)
        return self._kernel(specs)

    def _kernel(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        key = (specs,)
        kernel = self._kernels.get(key)
        if kernel is not None:
            self.stats["hits"] += 1
            return kernel
        with self._lock:  # threads asking for the same version compile it once
            kernel = self._kernels.get(key)
            if kernel is None:
                self.stats["misses"] += 1
                kernel = self._build(specs)
                self.stats["compilations"] += 1
                self._kernels[key] = kernel
            return kernel

    def target(self) -> tvm.target.Target:
        if self._target is None:
            self._target = pipeline.resolve_target(self.options["target"])
        return self._target

    def _build(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        stages: dict[str, str] = {}
        verbose = self.options["verbose"]

        def record(stage: str, text: str):
            stages[stage] = text
            if verbose:
                print(f"===== {self.__name__}: {stage} =====\n{text}", flush=True)

        record("python", self.parsed.source)
        record("ast", ast.dump(self.parsed.tree, indent=2))
        if self.options["backend"] == "tir":  # loop-level code straight to a TIR PrimFunc, no Relax
            from . import tir_backend
            return tir_backend.build(self, specs, record, stages)
        named = dict(zip((p.name for p in self.params), specs))
        mod = RelaxCodeGen(self.parsed, named, self.options).build()
        record("relax", mod.script())
        target = self.target()
        stage = "passes"
        try:
            mod = pipeline.lower(mod, target, self.options["schedule"], record, self.options["trials"])
            stage = "build"
            executable = pipeline.build(mod, target)
        except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
            message = f"TVM failed to compile '{self.__name__}' (during {stage} after {list(stages)[-1]})"
            if debug_enabled():
                raise self.parsed.source_map.error(self.parsed.tree, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
            raise self.parsed.source_map.error(
                self.parsed.tree, message + "; set BABYTRITON_DEBUG=1 to see the cause") from None
        record("source", pipeline.generated_source(executable, target, both="vdevice" in mod.global_infos))
        return Kernel(self.__name__, self.params, specs, target, executable, mod, stages)

    def cache_info(self) -> dict:
        return dict(self.stats, versions=len(self._kernels))

    def __repr__(self):
        return f"<babytriton.jit {self.__name__} target={self.options['target']!r}>"
