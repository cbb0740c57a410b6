"""`@jit`: the decorator, the in-memory cache of compiled versions, and the call path."""
from __future__ import annotations

import ast
import difflib
import functools
import gc
import inspect
import re
import threading

import numpy as np
import torch
import tvm
from tvm import relax

from . import cache, devices, dump, eager, pipeline, schedules
from . import explain as explaining
from . import fusion as fusion_
from .codegen import library
from .codegen.relax import RelaxCodeGen, quiet_tvm
from .source import parse_function
from .errors import CompilationError, debug_enabled
from .types import (DTYPES, ArgSpec, Param, Tensor, arg_spec, check_symbolic_sizes, numpy_to_vm,
                    params_from_signature, static_spec, torch_to_vm, unwrap, vm_to_torch)

OPTIONS = {"target": "cpu", "schedule": "dlight", "unroll": 16, "verbose": False, "backend": "relax",
           "cache": True, "trials": 16}
BACKENDS = ("relax", "tir")
# Exact argument signatures remembered per function before the table is reset (symbolic shapes
# can produce one per distinct size).
MAX_RUNNERS = 4096
# Runner tables kept per function, one per set of global values seen (switching back finds its table).
MAX_TABLES = 16


def _always() -> bool:
    return True


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
                 module: tvm.IRModule | None, stages: dict[str, str], *, fusion: dict | None = None,
                 source_map=None, module_loader=None):
        self.name = name
        self.params = params
        self.specs = specs
        self.target = target
        self.executable = executable
        self._module = module
        self._module_loader = module_loader   # a version loaded from disk reads its IR on demand
        self.stages = stages
        self.device_kind = pipeline.device_kind(target)
        self._vm_lock = threading.Lock()
        self._vm_locals: dict[int, threading.local] = {}   # device index -> each thread's VM function
        self.fusion_record = fusion
        self._source_map = source_map
        self.cache_key: cache.CacheKey | None = None
        self.cache_path: str | None = None    # its disk cache entry, where there is one
        self.from_disk = False
        self.why: list[str] = []              # key parts that differed from the nearest version
        self.size_checks: tuple = ()          # symbolic sizes the code matched to others (codegen.aligned)
        self.globals_key: tuple = ()          # the values of the globals it was compiled with (cache.global_state)

    @functools.cached_property
    def vm_devices(self) -> list | None:
        """With device blocks: the VM's devices (CPU and GPU); the arguments may be on either."""
        return devices.vm_devices(self.module) if "RealizeVDevice" in self.stages else None

    @property
    def module(self) -> tvm.IRModule:
        """The IRModule after the last stage (scheduled, on a GPU)."""
        if self._module is None and self._module_loader is not None:
            self._module = self._module_loader()
        return self._module

    @functools.cached_property
    def fusion(self) -> fusion_.FusionMap:
        """Each kernel after FuseTIR: the Relax ops it fused, their source lines, its CUDA kernels, the
        schedule rule that scheduled it and its launch shape."""
        cuda = self.stages.get("source", "") if self.device_kind == "cuda" else ""
        module = self.module
        summary = schedules.schedule_summary(module, self.target) if module is not None else None
        return fusion_.fusion_map(self.fusion_record, self._source_map, cuda, summary)

    def graph(self, which: str = "both"):
        """The dataflow graph before and/or after fusion ("before", "after", "both") as a picture:
        shows inline in Jupyter, `.save("f.svg")` writes it."""
        from . import graph
        return graph.draw(self.fusion_record, self.fusion, self._source_map, self.name, which)

    @property
    def source(self) -> str:
        """The generated code: CUDA kernels for a GPU target, LLVM IR for a CPU one."""
        return self.stages["source"]

    def vm_function(self, device_index: int):
        """The calling thread's VM function for this device. A Relax VM is not re-entrant (one frame
        stack and register file per VM), so each thread runs its own VM, made on its first call from
        the shared executable; the thread's VMs go when it ends."""
        local = self._thread_local(device_index)
        try:
            return local.fn
        except AttributeError:
            local.fn = fn = self._new_vm_function(device_index)
            return fn

    def _thread_local(self, device_index: int) -> threading.local:
        with self._vm_lock:
            local = self._vm_locals.get(device_index)
            if local is None:
                local = self._vm_locals[device_index] = threading.local()
            return local

    def _new_vm_function(self, device_index: int):
        vm_devices = self.vm_devices
        device = tvm.cuda(device_index) if self.device_kind == "cuda" else tvm.cpu()
        with self._vm_lock:  # one VM made at a time: loading reads the executable's shared tables
            return relax.VirtualMachine(self.executable, vm_devices or device)[self.name]

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
        self.vm_function(device_index)   # this thread's VM now: a device that can't run it fails here
        local = self._thread_local(device_index)
        new_vm = functools.partial(self._new_vm_function, device_index)
        converters = tuple(converters)
        cpu_kernels = self.device_kind == "cpu" or self.vm_devices is not None

        def run(args):
            if cpu_kernels:
                schedules.sync_threads()
            values = [convert(args[i]) for i, convert in converters]
            try:
                fn = local.fn
            except AttributeError:  # the runner was made by another thread: this one's first call
                fn = local.fn = new_vm()
            try:
                out = fn(*values)
            except Exception as e:  # noqa: BLE001 - TVM's run-time checks raise several types
                raise _run_error(self.name, e) from (e if debug_enabled() else None)
            return wrap(out)
        return run

    def check_sizes(self, args) -> None:
        """Each symbolic size that the code combines element-wise with another size must equal it
        (only a static 1 broadcasts): checked before the VM's own check, to name the line."""
        if not self.size_checks:
            return
        sizes = {}
        for param, value in zip(self.params, args):
            if param.kind == "tensor":
                for name, size in zip(param.annotation.shape, unwrap(value).shape):
                    if isinstance(name, str):
                        sizes.setdefault(name, (size, param.name))
        for name, want, where in self.size_checks:
            got, param = sizes.get(name, (None, None))
            expected = want if isinstance(want, int) else sizes.get(want, (None,))[0]
            if got is not None and expected is not None and got != expected:
                raise ValueError(f"{self.name}(): size '{name}' of parameter '{param}' is {got}, but {where} "
                                 f"combines it element-wise with a size of {expected}; a symbolic size must equal "
                                 "the sizes it meets (only a static 1 broadcasts)")

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
        self.check_sizes(args)
        return self.runner(args)(args)

    def __repr__(self):
        return f"<babytriton.Kernel {self.name} for {self.target.kind.name}, stages: {', '.join(self.stages)}>"


def _eager_when_empty(run, jitfn, positions: list[int]):
    """A GPU call whose symbolic-size tensors hold no element runs eagerly (torch's answer): TVM's
    CUDA launch of a grid of 0 blocks fails, and a kernel can't guard itself around its thread syncs.
    Static sizes of 0 are handled when compiling (the kernel has no body)."""
    def call(args):
        for i in positions:
            if 0 in getattr(args[i], "shape", (1,)):
                return jitfn.eager(*args)
        return run(args)
    return call


def warn_serial(kernel: Kernel) -> None:
    """A SerialKernelWarning for each kernel left with a large amount of work on one thread (one GPU
    block), naming the user's lines that it computes."""
    for name, work in schedules.serial_kernels(kernel.module, kernel.target):
        try:
            ops = kernel.fusion[name].ops
        except KeyError:
            ops = ()
        lines = [f"{kernel.fusion.filename}:{op.line}: {op.source}" for op in ops if op.line is not None]
        where = "; ".join(dict.fromkeys(lines)) or "(line unknown)"
        one = "one GPU block" if kernel.device_kind == "cuda" else "one thread"
        cache.warn(f"babytriton: kernel '{name}' of '{kernel.name}' runs about {work:,} loop iterations on {one} "
                   f"(no schedule rule spread it over more): {where}", schedules.SerialKernelWarning)


def _run_error(name: str, error: Exception) -> RuntimeError:
    """A failure inside the compiled code (TVM's run-time checks), without TVM's internals."""
    text = str(error)
    checked = re.search(re.escape(library.RUN_TIME_CHECK) + r"(.*)", text)
    if checked:  # a check that the generated code makes, with its own message
        return RuntimeError(checked.group(1).strip())
    if "match_cast" in text or "shape" in text and "mismatch" in text:
        reason = "an argument's sizes differ from the sizes this compiled version relies on"
    else:
        reason = "the compiled code stopped with an error"
    detail = f"\n[BABYTRITON_DEBUG] {type(error).__name__}: {text}" if debug_enabled() else \
        " (set BABYTRITON_DEBUG=1 to see TVM's message)"
    return RuntimeError(f"{name}(): {reason}{detail}")


def _via_data(convert):
    return lambda value: convert(value.data)


def _scalar_converter(dtype: str, device_kind: str):
    torch_dtype, device = DTYPES[dtype], torch.device(device_kind)
    return lambda value: torch_to_vm(torch.tensor(value, dtype=torch_dtype, device=device))


def _to_torch(out):
    if isinstance(out, tvm.runtime.Tensor):
        return vm_to_torch(out)
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
        self._kernels: dict[tuple, Kernel] = {}   # (specs, globals key) -> the compiled version
        self._lock = threading.RLock()
        # Short updates (counts, runner tables), never held while compiling: a call that finds its
        # version does not wait for another thread's compile. Exact without the GIL too.
        self._update_lock = threading.Lock()
        # What the cached call path reads, replaced whole (one atomic store) when a global changes:
        # (a check that the globals the function reads still resolve to the objects the runners were
        # made with — None when it reads none, _always before the first call —, the globals key,
        # the runners for those values: call key -> run).
        reads_names = bool(cache._free_paths(self.parsed.tree))
        self._state: tuple = (_always if reads_names else None, (), {})
        self._runner_tables: dict[tuple, dict] = {}
        self._target = None
        self.stats = {"compilations": 0, "hits": 0, "misses": 0, "disk_hits": 0, "disk_writes": 0}
        self._disk_warned = False
        # BABYTRITON_INTERPRET=1 at decoration: every call runs eagerly. Read here, once, so that
        # the cached call path costs one attribute test, not an environment lookup.
        self._interpret = eager.interpret_requested()

    # -- errors -------------------------------------------------------------------------------
    def _param_error(self, name: str, message: str) -> CompilationError:
        node = next((a for a in ast.walk(self.parsed.tree.args) if isinstance(a, ast.arg) and a.arg == name),
                    self.parsed.tree)
        return self.parsed.source_map.error(node, message)

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._interpret:
            return eager.run(self, args, kwargs)
        if kwargs or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        changed, values, runners = self._state
        if changed is not None and changed():
            changed, values, runners = self._globals_changed()
        key = self._call_key(args)
        try:
            run = runners[key]
        except KeyError:
            run = None
        except TypeError:  # an unhashable argument: _prepare explains which
            run = key = None
        if run is None:  # compiled outside the `except`, so that no lookup error is chained to its errors
            run = self._prepare(args, key, values, runners)
        return run(args)

    def _globals_changed(self) -> tuple:
        """A name the function reads resolves to another object: the runners for the new values."""
        with self._lock:
            changed, _, _ = self._state
            if changed is not None and not changed():  # another thread got here first
                return self._state
            changed, values = cache.global_state(self)   # one reading: the check and the values agree
            runners = self._runner_tables.get(values)
            if runners is None:
                if len(self._runner_tables) >= MAX_TABLES:
                    self._runner_tables.clear()
                runners = self._runner_tables[values] = {}
            self._state = (changed, values, runners)
            return self._state

    def eager(self, *args, **kwargs):
        """Run the original Python function on torch (the reference the compiled version must match):
        library ops run as their torch equivalents, kernels through TVM on their own; `print` and
        `breakpoint()` work. Arguments are checked, and results returned, as a compiled call's."""
        return eager.run(self, args, kwargs)

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
        unknown = [k for k in kwargs if k not in self.signature.parameters]
        if unknown:  # before any missing argument: the misspelt keyword is the mistake
            hint = difflib.get_close_matches(unknown[0], self.signature.parameters, n=1)
            raise TypeError(f"{self.__name__}({', '.join(p.name for p in self.params)}): got an unexpected keyword "
                            f"argument {unknown[0]!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            names = ", ".join(p.name for p in self.params)
            raise TypeError(f"{self.__name__}({names}): {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _prepare(self, args, key, values: tuple, runners: dict):
        """First call with these exact argument types: check them, find or compile, make a runner
        (remembered in `runners`, the table for the global `values`, if it was compiled with them)."""
        specs = self._specs(args)
        if not self.heterogeneous:  # device blocks take arguments from either device
            check_devices(self.params, args, pipeline.device_kind(self.target()), self.__name__)
        kernel = self._kernel(specs)
        kernel.check_sizes(args)
        run = kernel.runner(args)
        symbolic = [i for i, s in enumerate(specs) if s.kind == "tensor" and not all(isinstance(d, int) for d in s.shape)]
        if kernel.device_kind == "cuda" and symbolic and not self.heterogeneous:
            run = _eager_when_empty(run, self, symbolic)
        if key is not None and kernel.globals_key == values:  # else a global changed meanwhile
            with self._update_lock:
                if len(runners) >= MAX_RUNNERS:
                    runners.clear()
                runners[key] = run
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
        return self._kernel(self._specs_for(args, kwargs))

    def _specs_for(self, args, kwargs) -> tuple[ArgSpec, ...]:
        if not args and not kwargs and self.params:
            specs = tuple(static_spec(p) if p.kind != "constexpr" or p.default is inspect.Parameter.empty
                          else ArgSpec("constexpr", value=p.default) for p in self.params)
            if self.heterogeneous:
                specs = devices.with_devices(self.params, specs, None, self.__name__, self._device_kind())
            return specs
        if kwargs or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        return self._specs(args)

    def _memory_key(self, specs: tuple[ArgSpec, ...]) -> tuple:
        """The in-memory key of a version: the argument specs and the current values of the globals."""
        changed, values, _ = self._state
        if changed is not None and changed():
            _, values, _ = self._globals_changed()
        return specs, values

    def _kernel(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        key = self._memory_key(specs)
        kernel = self._kernels.get(key)   # without the lock: a hit never waits for another's compile
        if kernel is None:
            with self._lock:  # threads asking for the same version compile it once
                kernel = self._kernels.get(key)
                if kernel is None:
                    self.stats["misses"] += 1
                    kernel = self._obtain(specs)
                    kernel.globals_key = key[1]
                    self._kernels[key] = kernel
                    return kernel
        with self._update_lock:
            self.stats["hits"] += 1
        return kernel

    def _obtain(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        """A version not in memory: from the disk cache when it holds one, else compiled (and stored)."""
        target = self.target()
        key = cache.make_key(self, specs, target)
        others = [k.cache_key.summary() for k in self._kernels.values() if k.cache_key is not None]
        why = cache.nearest(others, key.summary())[1] if others else []
        if why and self.options["verbose"]:
            print(f"===== {self.__name__}: new version; differs from the nearest in: {'; '.join(why)}", flush=True)
        use_disk = cache.disk_enabled(self.options["cache"]) and key.unstable is None
        path = cache.entry_dir(self, key) if use_disk else None
        kernel = None
        replace = False
        if use_disk and cache.loadable_here(target):
            try:
                entry = cache.load(path, key)
            except cache.Corrupt as e:
                cache.warn(f"babytriton: the disk cache entry of '{self.__name__}' at {path} is corrupt ({e}); "
                           "recompiling and replacing it")
                entry, replace = None, True
            if entry is not None:
                kernel = self._from_entry(entry, specs, target, path)
                kernel.from_disk = True
                kernel.size_checks = entry.size_checks
                self.stats["disk_hits"] += 1
                if self.options["verbose"] or dump.printing():
                    for stage, text in entry.stages.items():
                        dump.print_stage(self.__name__, stage, text)
        if kernel is None:
            kernel = self._build(specs)
            self.stats["compilations"] += 1
            if use_disk and (replace or not (path / "meta.json").exists()):
                self._store(path, key, kernel, replace)
        kernel.cache_key, kernel.why = key, why
        kernel.cache_path = str(path) if path is not None and (path / "meta.json").exists() else None
        self._dump(kernel, key)
        return kernel

    def _from_entry(self, entry: cache.Entry, specs, target, path) -> Kernel:
        loader = self._module_loader(path, specs)
        if entry.backend == "tir":  # the PrimFunc's library, called without a VM
            from . import tir_backend
            return tir_backend.TIRKernel(self.parsed.name, self.params, specs, target, entry.executable, None,
                                         entry.stages, entry.outputs, module_loader=loader)
        return Kernel(self.__name__, self.params, specs, target, entry.executable, None, entry.stages,
                      fusion=entry.fusion, source_map=self.parsed.source_map, module_loader=loader)

    def _module_loader(self, path, specs):
        def load():
            return cache.load_module_json(path) or self._build(specs).module
        return load

    def _store(self, path, key, kernel: Kernel, replace: bool) -> None:
        try:
            if cache.store(path, key, kernel.executable, kernel.stages, kernel.fusion_record, kernel.module,
                           replace, kernel.size_checks, self.options["backend"], getattr(kernel, "outputs", ())):
                self.stats["disk_writes"] += 1
        except Exception as e:  # noqa: BLE001 - a full disk, no C compiler...: carry on without the entry
            if not self._disk_warned:
                self._disk_warned = True
                cache.warn(f"babytriton: could not write the disk cache entry of '{self.__name__}' under "
                           f"{path.parent} ({type(e).__name__}: {e}); continuing without it")

    def _dump(self, kernel: Kernel, key) -> None:
        root = dump.directory()
        if root is None:
            return
        extra = {"key.txt": explaining.key_text(key, kernel.why), "fusion.txt": str(kernel.fusion) + "\n"}
        folder = dump.version_folder(self.__name__, self.params, kernel.specs, key.digest)
        try:
            dump.write(root, folder, kernel.stages, kernel.target.kind.name, extra)
        except OSError as e:
            cache.warn(f"babytriton: could not write the stage dump under {root} ({e})")

    def explain(self, *args, **kwargs) -> explaining.Explanation:
        """Print and return the cache key's parts for these arguments, whether a compiled version
        exists in memory or on disk, and how it differs from the nearest existing version.
        With no arguments, for the annotations alone (as compile())."""
        specs = self._specs_for(args, kwargs)
        result = explaining.explain(self, specs, cache.make_key(self, specs, self.target()))
        print(result.text)
        return result

    def target(self) -> tvm.target.Target:
        if self._target is None:
            self._target = pipeline.resolve_target(self.options["target"])
        return self._target

    def _build(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        stages: dict[str, str] = {}
        verbose = self.options["verbose"] or dump.printing()

        def record(stage: str, text: str):
            stages[stage] = text
            if verbose:
                dump.print_stage(self.__name__, stage, text)

        record("python", self.parsed.source)
        record("ast", ast.dump(self.parsed.tree, indent=2))
        if self.options["backend"] == "tir":  # loop-level code straight to a TIR PrimFunc, no Relax
            from . import tir_backend
            return tir_backend.build(self, specs, record, stages)
        if self.options["schedule"] == "meta_schedule":  # before compiling: say which extra to install
            from . import schedules
            schedules.require_tuning_extras()
        named = dict(zip((p.name for p in self.params), specs))
        codegen = RelaxCodeGen(self.parsed, named, self.options)
        generated = mod = codegen.build()
        record("relax", mod.script())
        target = self.target()
        stage = "passes"
        modules: dict[str, tvm.IRModule] = {}
        failed = None
        with quiet_tvm():
            try:
                mod = pipeline.lower(mod, target, self.options["schedule"], record, self.options["trials"], modules)
                stage = "build"
                executable = pipeline.build(mod, target)
            except Exception as e:  # noqa: BLE001 - TVM's failures past code generation
                # at the expression whose op fails alone, if one does; else at the `def`
                var = pipeline.failing_binding(generated, target, self.options["schedule"], self.options["trials"])
                node = codegen.binding_nodes.get(var, self.parsed.tree) if var is not None else self.parsed.tree
                during = f"during {stage} after {list(stages)[-1]}"
                message = f"TVM failed to compile '{self.__name__}' ({during})" if node is self.parsed.tree else \
                    f"could not compile `{ast.unparse(node)}`: the compiler failed on it ({during})"
                if debug_enabled():
                    raise self.parsed.source_map.error(node, f"{message}\n[BABYTRITON_DEBUG] {e}") from e
                failed = (node, message + "; set BABYTRITON_DEBUG=1 to see the cause")
            if failed:  # TVM's objects in the failed passes are freed here, their warnings silenced
                gc.collect()
        if failed:
            raise self.parsed.source_map.error(*failed)
        record("source", pipeline.generated_source(executable, target, both="vdevice" in mod.global_infos))
        kernel = Kernel(self.__name__, self.params, specs, target, executable, mod, stages,
                        fusion=self._fusion_record(generated, codegen.binding_lines, modules),
                        source_map=self.parsed.source_map)
        kernel.size_checks = tuple(codegen.size_checks)
        warn_serial(kernel)
        return kernel

    def _fusion_record(self, generated, binding_lines, modules) -> dict | None:
        try:
            return fusion_.analyse(generated, binding_lines, modules)
        except Exception as e:  # noqa: BLE001 - the map is a view; it must never break a compile
            if debug_enabled():
                raise
            cache.warn(f"babytriton: could not build the fusion map of '{self.__name__}' "
                       f"({type(e).__name__}: {e}); k.fusion will be empty")
            return None

    def cache_info(self) -> dict:
        return dict(self.stats, versions=len(self._kernels))

    def __repr__(self):
        return f"<babytriton.jit {self.__name__} target={self.options['target']!r}>"
