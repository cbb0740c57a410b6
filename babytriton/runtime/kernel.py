"""The runtime: `Kernel`, one compiled version of a @jit function, callable with the caller's tensors,
and the conversion of arguments and results between torch/numpy and TVM. Both backends' builds
(`Compiled`) and disk cache hits become the same `Kernel`: a Relax VM function for backend="relax",
the PrimFunc itself for backend="tir"."""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import threading

import numpy as np
import torch
import tvm
import tvm_ffi
from tvm import relax

from ..frontend import devices
from ..passes import offload
from .. import schedules
from ..core import targets
from . import threads
from . import fusion as fusion_
from ..frontend.arguments import ArgSpec, arg_spec, check_symbolic_sizes, unwrap
from ..codegen import library
from ..core import dlpack
from ..core.dlpack import numpy_to_torch, numpy_to_vm, torch_to_vm, vm_to_torch
from ..core.errors import debug_enabled
from ..lowering.pipeline import RELEASE
from ..core.types import DTYPES, TORCH_TO_NAME, Param, Tensor


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What a backend's build gives (and a disk cache entry holds): the executable and its stages."""
    backend: str                       # "relax": a Relax VM executable; "tir": a library of the PrimFunc
    executable: object
    module: tvm.IRModule | None        # the IRModule after the last stage; None when read on demand
    stages: dict[str, str]
    fusion: dict | None = None         # the fusion record (fusion.analyse), backend="relax"
    size_checks: tuple = ()            # symbolic sizes the code matched to others (codegen.aligned)
    outputs: tuple = ()                # backend="tir": the parameters the function writes


class Kernel:
    """One compiled version of a @jit function: callable, with the IR of every stage; complete when made."""

    def __init__(self, name: str, params: list[Param], specs: tuple[ArgSpec, ...], target, compiled: Compiled, *,
                 source_map=None, module_loader=None, cache_key=None, cache_path: str | None = None,
                 from_disk: bool = False, why: list[str] = (), globals_key: tuple = ()):
        self.name = name
        self.params = params
        self.specs = specs
        self.target = target
        self.backend = compiled.backend
        self.executable = compiled.executable
        self._module = compiled.module
        self._module_loader = module_loader   # a version loaded from disk reads its IR on demand
        self.stages = compiled.stages
        self.device_blocks = "RealizeVDevice" in self.stages   # `with bt.device(...)` blocks: CPU and GPU code
        self.device_kind = targets.device_kind(target)
        self._vm_lock = threading.Lock()
        self._vm_locals: dict[int, threading.local] = {}   # device index -> each thread's VM function
        self._function = None                 # backend="tir": the PrimFunc, shared by all threads
        self.fusion_record = compiled.fusion
        self.size_checks = compiled.size_checks
        self.outputs = list(compiled.outputs)
        self._source_map = source_map
        self.cache_key = cache_key            # the disk cache key (cache.CacheKey)
        self.cache_path = cache_path          # its disk cache entry, where there is one
        self.from_disk = from_disk
        self.why = list(why)                  # key parts that differed from the nearest version
        self.globals_key = globals_key        # the values of the globals it was compiled with (cache.global_state)
        if self.device_kind == "cpu":
            library = os.path.join(cache_path, "lib.so") if cache_path else None   # this code's, stored
            if self.uses_thread_pool:
                self.executable = threads.run_on_torch_threads(self.executable, self.backend, library, from_disk)
            elif library is not None and not from_disk and not self.device_blocks:
                # just stored: its library is this code compiled already, and loading it (~1 ms) spares
                # the VM's JIT compiling the module again (40-160 ms a kernel, a fifth on top of a compile).
                # (Not with device blocks: the library holds their CUDA, which a machine without a CUDA
                # runtime can't load; the in-memory module runs its CPU part there)
                self.executable = threads.load_copy(library, self.backend)

    @functools.cached_property
    def vm_devices(self) -> list | None:
        """With device blocks: the VM's devices (CPU and GPU); the arguments may be on either."""
        return devices.vm_devices(self.module) if self.device_blocks else None

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
        """A new VM's function for this device; the VM's `pipeline.RELEASE` goes in the calling thread's
        `release`, next to the function in `fn` where a runner looks for it."""
        vm_devices = self.vm_devices
        device = tvm.cuda(device_index) if self.device_kind == "cuda" else tvm.cpu()
        with self._vm_lock:  # one VM made at a time: loading reads the executable's shared tables
            vm = relax.VirtualMachine(self.executable, vm_devices or device)
        local = self._thread_local(device_index)
        local.release = vm[RELEASE]
        return vm[self.name]

    def runner(self, args: tuple):
        """A fast call for arguments of exactly these types and shapes: convert, run, wrap.

        A torch tensor that TVM can take as it is (compact, 64-byte aligned, no negative bit: three
        flag reads per call) is handed to the VM function itself: tvm_ffi reads it through torch's
        DLPack exchange API, and hands results back as torch tensors the same way, each without a
        Python-level conversion; so is a permuted or broadcast one that the version was compiled for
        (ArgSpec.layout), as its compact storage view. Any other is copied compact first (`_compact`),
        still a torch tensor: tvm_ffi reads torch's current stream of the tensors' GPU from any of them."""
        if self.backend == "tir":
            return self._tir_runner(args)
        run = self._torch_runner(args)
        if run is not None:
            return run
        device_index, direct, converters, all_numpy = _argument_plan(self.specs, args, self.device_kind)
        has_tensor = any(s.kind == "tensor" for s in self.specs)
        wrap = _to_numpy if all_numpy and has_tensor else _to_torch
        # the VM holds a call's result until its next call (pipeline.RELEASE): worth a call to drop it
        # where results are large enough to matter to the cache, judged by the inputs' size
        held = sum(_nbytes(value) for spec, value in zip(self.specs, args) if spec.kind == "tensor")
        release = held >= RELEASE_BYTES
        self.vm_function(device_index)   # this thread's VM now: a device that can't run it fails here
        local = self._thread_local(device_index)
        new_vm = functools.partial(self._new_vm_function, device_index)
        failed = functools.partial(_run_error, self.name)   # TVM's error as the user's RuntimeError
        env = {"sync_threads": threads.sync_threads, "compact": _compact, "numpy_to_torch": numpy_to_torch,
               "local": local, "new_vm": new_vm, "failed": failed, "debug_enabled": debug_enabled,
               "T": torch.Tensor, "wrap": wrap}
        env.update((f"convert{i}", convert) for i, convert in converters)
        for i, spec in enumerate(self.specs):
            if spec.layout is not None:
                env.update(spec.layout.constants(str(i)))
        passed = "".join(f"a{i}, " for i, s in enumerate(self.specs) if s.kind != "constexpr")
        code = _run_source(direct, [i for i, _ in converters], passed, self.uses_thread_pool, release,
                           wrap is _to_torch)
        exec(_compiled(code), env)  # noqa: S102 - made from argument positions only
        if self.device_kind == "cuda" and torch.cuda.device_count() > 1:
            return keeping_current_device(env["run"])
        return env["run"]

    @functools.cached_property
    def direct_call(self):
        """(torch-level function, its inputs) where the compiled function is nothing but one call of a
        function offload.py hands work to (a matrix product, attention), else None: a call then goes
        straight to torch, without the VM, its packed call and their conversions (offload.direct_call)."""
        record = self.fusion_record
        if self.backend != "relax" or self.vm_devices is not None or not record or len(record["kernels"]) != 1 \
                or offload.rule_of(record["kernels"][0]["name"]) is None:
            return None
        return offload.direct_call(self.module[self.name])

    def _torch_runner(self, args: tuple):
        """The runner of a `direct_call`, for arguments that are torch tensors where it reads tensors
        (None otherwise: numpy arrays and the rest go through the VM, which converts them)."""
        call = self.direct_call
        if call is None:
            return None
        function, inputs = call
        passed = [i for i, spec in enumerate(self.specs) if spec.kind != "constexpr"]   # the VM's parameters
        failed = functools.partial(_run_error, self.name)
        env = {"function": function, "failed": failed, "debug_enabled": debug_enabled}
        values = []
        for i, (kind, value) in enumerate(inputs):
            if kind == "param":
                position = passed[value]
                if type(args[position]) is not torch.Tensor:
                    return None
                layout = self.specs[position].layout
                read = f"args[{position}]"
                if layout is not None:   # the function's parameter is the tensor's storage view
                    env.update(layout.constants(str(i)))
                    read = layout.expression(read, str(i))
                values.append(read)
            else:
                env[f"value{i}"] = value
                values.append(f"value{i}")
        lines = ["def run(args):",
                 "    try:",
                 f"        return function({', '.join(values)})",
                 "    except Exception as e:",
                 "        raise failed(e) from (e if debug_enabled() else None)"]
        exec(_compiled("\n".join(lines) + "\n"), env)  # noqa: S102 - made above from argument positions only
        return env["run"]

    @functools.cached_property
    def uses_thread_pool(self) -> bool:
        """Whether a call may launch a parallel loop (in CPU code), so must size the calling thread's
        launches first (threads.sync_threads); CUDA-only code never does."""
        if self.device_kind == "cuda" and self.vm_devices is None:
            return False
        source = self.stages.get("source")
        return source is None or self.device_kind != "cpu" or "TVMBackendParallelLaunch" in source

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
        # a version compiled for a compact tensor takes any layout (copied compact where it must be)
        if len(specs) == len(self.specs):
            specs = tuple(s if mine.layout is not None else dataclasses.replace(s, layout=None)
                          for s, mine in zip(specs, self.specs))
        if specs != self.specs:
            raise TypeError(f"{self.name}(): these arguments need another compiled version "
                            "(call the @jit function itself to get one)")
        if self.vm_devices is None:
            devices.check_devices(self.params, args, self.device_kind, self.name)
        check_symbolic_sizes(self.params, list(args), self.name)
        self.check_sizes(args)
        run = self.runner(args)
        if self.backend == "relax" and self.outputs:  # parameters updated in place: copied back (codegen.mutation)
            from ..codegen import mutation  # noqa: PLC0415 - the compiler's modules import this one
            run = mutation.write_back(run, mutation.positions(self, self.params))
        return run(args)

    def __repr__(self):
        return f"<babytriton.Kernel {self.name} for {self.target.kind.name}, stages: {', '.join(self.stages)}>"

    def _tir_runner(self, args: tuple):
        """backend="tir": the PrimFunc called on the arguments themselves; it returns those it writes."""
        # A compiled PrimFunc keeps no state between calls (unlike a Relax VM): threads share it.
        with self._vm_lock:
            if self._function is None:
                self._function = self.executable[self.name]
            function = self._function
        positions = [i for i, p in enumerate(self.params) if p.name in self.outputs]
        names = [p.name for p in self.params]
        tensors = [i for i, s in enumerate(self.specs) if s.kind == "tensor"]
        converters = []
        for position, spec in enumerate(self.specs):
            if spec.kind == "constexpr":
                continue
            if spec.kind == "scalar":
                converters.append((position, _SCALARS[spec.dtype]))
            else:
                converters.append((position, _output if position in positions else _input))
        converters = tuple(converters)
        outputs = tuple(positions)

        cpu = self.target.kind.name != "cuda"
        launch = function if cpu else on_torch_stream(function, _cuda_index(self.specs, args))

        def run(args):
            if cpu:  # bt.parallel loops run on torch's threads, as many as this thread may use
                threads.sync_threads()
            _check_aliasing(args, outputs, tensors, names, self.name)
            write_back = []
            call_args = []
            for position, convert in converters:
                value, back = convert(args[position], names[position], self.name)
                call_args.append(value)
                if back is not None:
                    write_back.append(back)
            launch(*call_args)
            for back in write_back:
                back()
            if not outputs:
                return None
            results = tuple(args[i] for i in outputs)
            return results[0] if len(results) == 1 else results
        return run


RELEASE_BYTES = 1 << 20


def _nbytes(value) -> int:
    data = value.data if isinstance(value, Tensor) else value
    return data.nbytes if isinstance(data, (np.ndarray, torch.Tensor)) else 0


@functools.lru_cache(maxsize=256)
def _compiled(source: str):
    """A runner's generated text, compiled once: a direct Kernel call makes a runner per call."""
    return compile(source, "<babytriton runner>", "exec")


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


def _compact(t: torch.Tensor) -> torch.Tensor:
    """A copy that TVM takes as it is (as dlpack.torch_to_vm's), kept a torch tensor: tvm_ffi then
    launches the call on torch's current stream of its device, as for the tensors passed as they are."""
    t = t.resolve_neg() if t.is_neg() else t
    return t if dlpack.as_is(t) else t.clone(memory_format=torch.contiguous_format)


def _via_data(convert):
    return lambda value: convert(value.data)


def _scalar_converter(dtype: str, device_kind: str, device_index: int):
    """A number as the 0-d tensor the VM takes: a fresh torch tensor (a function may return the scalar
    itself, so it must be the caller's alone), compact and aligned, so handed over as it is.
    `torch.scalar_tensor` on a GPU is a fill kernel taking the value as its argument, queued like the
    call's kernels: `torch.tensor(value, device=...)` copied from pageable memory and waited for the
    stream, so the GPU idled between calls (AdamW's lr and step on the H100: 200 us a call for a
    160 us kernel). On a GPU, on the call's GPU (`device_index`), not torch's current one."""
    torch_dtype, device = DTYPES[dtype], torch.device(device_kind, device_index if device_kind == "cuda" else None)
    return lambda value: torch.scalar_tensor(value, dtype=torch_dtype, device=device)


def _to_torch(out):
    if isinstance(out, torch.Tensor):   # converted by tvm_ffi (the call took a torch tensor)
        return out
    if isinstance(out, tvm.runtime.Tensor):
        return vm_to_torch(out)
    if len(out) == 0:
        return None
    return tuple(_to_torch(o) for o in out)


def _to_numpy(out):
    if isinstance(out, torch.Tensor):   # converted by tvm_ffi (the call took a torch tensor)
        return out.numpy(force=True).copy()   # a fresh array, never an argument's memory
    if isinstance(out, tvm.runtime.Tensor):
        return out.numpy()
    if len(out) == 0:
        return None
    return tuple(_to_numpy(o) for o in out)


_SCALARS = {
    "int64": lambda value, name, fname: (int(value), None),
    "float64": lambda value, name, fname: (float(value), None),
    "bool": lambda value, name, fname: (bool(value), None),
}


def _to_tvm(data: torch.Tensor):
    if data.numel() == 0:  # any strides describe no memory, but the PrimFunc checks for compact ones
        device = tvm.cuda(data.device.index or 0) if data.is_cuda else tvm.cpu()
        return tvm.runtime.empty(tuple(data.shape), TORCH_TO_NAME[data.dtype], device)
    return torch_to_vm(data)


def _input(value, name, fname):
    data = unwrap(value)
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(np.ascontiguousarray(data)) if data.flags.writeable else torch.tensor(data)
    return _to_tvm(data), None


def _output(value, name, fname):
    """An argument the function writes: passed without a copy, or copied back after the call."""
    data = unwrap(value)
    if isinstance(data, np.ndarray):
        if not data.flags.writeable:
            raise ValueError(f"{fname}(): parameter '{name}' is written by the function, but the numpy array "
                             "passed for it is read-only")
        data = torch.from_numpy(data)
    if data.numel() == 0:
        return _to_tvm(data), None
    try:
        return tvm.runtime.from_dlpack(data), None
    except Exception:  # noqa: BLE001 - TVM takes only compact, aligned memory: work on a copy
        copy = data.clone(memory_format=torch.contiguous_format)
        return tvm.runtime.from_dlpack(copy), lambda: data.copy_(copy)


class _Layout:
    """Where a tensor's bytes are, in numpy's terms, so that numpy can compare layouts exactly
    (without reading the memory, which may be on a GPU)."""

    def __init__(self, data):
        if isinstance(data, np.ndarray):
            address, strides = data.__array_interface__["data"][0], data.strides
        else:
            address, strides = data.data_ptr(), tuple(s * data.element_size() for s in data.stride())
        itemsize = data.itemsize if isinstance(data, np.ndarray) else data.element_size()
        self.__array_interface__ = {"data": (address, False), "shape": tuple(data.shape) + (itemsize,),
                                    "strides": tuple(strides) + (1,), "typestr": "|u1", "version": 3}


def _span(data) -> tuple[int, int]:
    """The lowest and one-past-highest byte address a tensor's elements use."""
    if isinstance(data, np.ndarray):
        address, strides, itemsize = data.__array_interface__["data"][0], data.strides, data.itemsize
    else:
        itemsize = data.element_size()
        address, strides = data.data_ptr(), [s * itemsize for s in data.stride()]
    low = high = address
    for n, stride in zip(data.shape, strides):
        if n == 0:
            return address, address
        low, high = (low + (n - 1) * stride, high) if stride < 0 else (low, high + (n - 1) * stride)
    return low, high + itemsize


def _check_aliasing(args, outputs, tensors, names, fname):
    """A parameter the function writes must not share memory with another tensor argument
    (as torch's out= arguments)."""
    if not outputs:
        return
    spans = {i: _span(unwrap(args[i])) for i in tensors}
    for i in outputs:
        for j in tensors:
            if i != j and spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1] and np.shares_memory(
                    np.asarray(_Layout(unwrap(args[i]))), np.asarray(_Layout(unwrap(args[j])))):
                raise ValueError(f"{fname}(): parameter '{names[i]}' is written by the function and shares "
                                 f"memory with parameter '{names[j]}'; pass separate tensors")


def _argument_plan(specs, args: tuple, device_kind: str) -> tuple:
    """How a runner passes each argument: (the CUDA device index, [(position, how to read it as torch)]
    for tensors passed as they are where TVM can, [(position, conversion)] for every other argument
    passed, whether every tensor is a NumPy array)."""
    device_index = _cuda_index(specs, args)
    direct = []
    converters = []
    all_numpy = True
    for position, (spec, value) in enumerate(zip(specs, args)):
        if spec.kind == "constexpr":
            continue
        if spec.kind == "scalar":
            converters.append((position, _scalar_converter(spec.dtype, spec.device or device_kind, device_index)))
            continue
        data = value.data if isinstance(value, Tensor) else value
        if isinstance(data, np.ndarray):
            convert = numpy_to_vm
            read = f"numpy_to_torch(args[{position}])"
        else:
            all_numpy = False
            convert = torch_to_vm
            read = f"args[{position}].data" if isinstance(value, Tensor) else f"args[{position}]"
            if spec.layout is not None:   # its storage view (layouts.py), whose names the runner holds
                read = spec.layout.expression(read, str(position))
        if data.size if isinstance(data, np.ndarray) else data.numel():
            direct.append((position, read))
            continue   # an empty one goes through torch_to_vm, which gives it compact strides
        converters.append((position, convert if not isinstance(value, Tensor) else _via_data(convert)))
    return device_index, direct, converters, all_numpy


def _cuda_index(specs, args) -> int:
    """The GPU a call runs on: its CUDA tensors' (one GPU: devices.check_devices), else 0."""
    return next((data.device.index for spec, data in zip(specs, map(unwrap, args)) if spec.kind == "tensor"
                 and isinstance(data, torch.Tensor) and data.is_cuda), 0)


def on_torch_stream(function, index: int):
    """`function` launched on torch's current stream of GPU `index`: a PrimFunc's TVM tensors carry no
    stream, and TVM launches on the one tvm_ffi holds for the device (else the null stream)."""
    device = tvm_ffi.device("cuda", index)

    def call(*args):
        with tvm_ffi.use_raw_stream(device, torch.cuda.current_stream(index).cuda_stream):
            return function(*args)
    return keeping_current_device(call)


def keeping_current_device(function):
    """`function` leaving torch's current GPU as the caller set it: TVM's host code sets the device of
    the tensors it launches on, which torch would otherwise take as its current GPU from then on."""
    def call(*args):
        before = torch.cuda.current_device()
        try:
            return function(*args)
        finally:
            if torch.cuda.current_device() != before:
                torch.cuda.set_device(before)
    return call


def _run_source(direct: list, converted: list[int], passed: str, sync: bool, release: bool, to_torch: bool) -> str:
    """A runner's source: one statement per argument, so that a call costs no loop, list or Python
    call per argument (a loop over the arguments took 0.15 us of a 2 us call)."""
    lines = ["def run(args):"]
    if sync:
        lines.append("    sync_threads()")
    for i, read in direct:   # dlpack.as_is, inlined (a call would cost a third of the test)
        lines += [f"    a{i} = {read}",
                  f"    if not (a{i}.is_contiguous() and not a{i}.data_ptr() & 63 and not a{i}.is_neg()):",
                  f"        a{i} = compact(a{i})"]
    lines += [f"    a{i} = convert{i}(args[{i}])" for i in converted]
    lines += ["    try:",
              "        fn = local.fn",
              "    except AttributeError:  # the runner was made by another thread: this one's first call",
              "        fn = local.fn = new_vm()",
              "    try:",
              f"        out = fn({passed})",
              *(["        local.release()"] if release else []),
              "    except Exception as e:  # TVM's run-time checks raise several types",
              "        raise failed(e) from (e if debug_enabled() else None)",
              "    return out if type(out) is T else wrap(out)" if to_torch else "    return wrap(out)"]
    return "\n".join(lines) + "\n"
