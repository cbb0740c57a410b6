"""The launcher: `@triton.jit` makes a JITFunction, `kernel[grid](*args, **meta)` binds the arguments,
evaluates the grid and runs the kernel, interpreted (`BABYTRITON_INTERPRET=1`) or compiled once per
specialisation; `triton.autotune`/`Config`/`heuristics` choose meta-parameters, as Triton's do."""
from __future__ import annotations

import functools
import inspect
import operator
import os
import statistics
import time

import torch

from ..core import config
from ..core.errors import Diagnostic
from ..frontend.source import environment, parse_function
from . import interpreter, launcher, semantics
from .language import core as tl

# launch options Triton accepts beside the kernel's parameters, with their defaults
LAUNCH_OPTIONS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None, "enable_fp_fusion": True,
                  "debug": False}
_KERNEL_CODES: set = set()  # every @triton.jit function's code: an error's frame in one is the user's line


def interpret_mode() -> bool:
    """`BABYTRITON_INTERPRET=1` (read at each launch) runs kernels in the interpreter. Unset, the
    common case, is seen in CPython's own copy of the environment: os.environ.get encodes and decodes
    (a sixth of a small kernel's launch)."""
    if _ENVIRON is not None and _INTERPRET_KEY not in _ENVIRON:
        return False
    return config.interpret_requested()


_ENVIRON = getattr(os.environ, "_data", None) if hasattr(os.environ, "encodekey") else None
_INTERPRET_KEY = os.environ.encodekey("BABYTRITON_INTERPRET") if _ENVIRON is not None else None


def _is_constexpr(annotation) -> bool:
    return annotation is tl.constexpr or annotation in ("tl.constexpr", "constexpr", "triton.language.constexpr")


class JITFunction:
    """A Triton kernel (or helper): its Python function, parsed once, its constexpr parameters, and the
    compiled versions by specialisation."""

    __triton_jit__ = True

    def __init__(self, fn, do_not_specialize=(), **_options):
        self.fn = fn
        self.parsed = parse_function(fn)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        self.constexprs = {n for n, p in self.signature.parameters.items() if _is_constexpr(p.annotation)}
        self.do_not_specialize = set(do_not_specialize)
        self.cache: dict = {}
        self.launchers: dict = {}   # launch key -> fast launch (launcher.py)
        self.keyers: dict = {}      # (positional count, keyword names) -> launch key function (launcher.keyer)
        self._by_value = frozenset(self.constexprs | (set(LAUNCH_OPTIONS) - set(self.arg_names)))
        self._exact = tuple(n in self._by_value for n in self.arg_names)
        _KERNEL_CODES.add(fn.__code__)

    @property
    def globals(self) -> dict:
        """The names the kernel reads (looked up now: a helper may be defined after the kernel)."""
        return environment(self.fn)

    @property
    def source_map(self):
        return self.parsed.source_map

    def __getitem__(self, grid):
        return functools.partial(self.run, grid=grid)   # a C call, not a Python frame: launches are hot

    def __call__(self, *args, **kwargs):
        if tl.active_implementation() is None:
            raise TypeError(f"@triton.jit function {self.__name__!r} is launched with {self.__name__}[grid](...), "
                            "or called from another kernel")
        return self.fn(*args, **kwargs)

    def bind(self, args: tuple, kwargs: dict, partial: bool = False) -> tuple[dict, dict]:
        """The kernel's arguments by name (defaults applied) and the launch options."""
        options = {k: kwargs.pop(k, v) for k, v in LAUNCH_OPTIONS.items() if k not in self.signature.parameters}
        try:
            bound = (self.signature.bind_partial if partial else self.signature.bind)(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"launching {self.__name__}: {e}") from None
        bound.apply_defaults()
        return dict(bound.arguments), options

    def run(self, *args, grid, **kwargs):
        interpret = interpret_mode()
        try:
            key = None if interpret else self._keyer(len(args), tuple(kwargs))(args, kwargs)
            fast = self.launchers.get(key)
        except TypeError:   # an unhashable constexpr: the slow path keys it by repr
            key = fast = None
        if fast is not None:
            return fast(args, kwargs, grid)
        runtime, constants, options = self._split(args, dict(kwargs))
        grid = launch_grid(grid, {**runtime, **constants})
        if interpret:
            return interpreter.run(self.fn, grid, runtime, constants, _KERNEL_CODES)
        compiled = self.compiled(runtime, constants, options)
        compiled.launch(grid, tuple(runtime.values()))
        launcher.remember(self.launchers, key, launcher.make_launcher(compiled, self.arg_names, args, kwargs, runtime,
                                                                      constants, launch_grid))

    def _keyer(self, count: int, names: tuple):
        """The launch key function for this shape of launch (launcher.keyer), made on first use."""
        keyer = self.keyers.get((count, names))
        if keyer is None:
            if len(self.keyers) >= launcher.MAX_LAUNCHERS:
                self.keyers.clear()
            keyer = self.keyers[count, names] = launcher.keyer(count, names, self._exact, self._by_value)
        return keyer

    def warmup(self, *args, grid=None, target=None, **kwargs):
        """Compile for these arguments without running (Triton's `kernel.warmup`): the compiled kernel,
        whose `stages` show each step; `target` ("cpu", "cuda", a tvm Target) other than the tensors'."""
        runtime, constants, options = self._split(args, kwargs)
        return self.compiled(runtime, constants, options, target)

    def _split(self, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
        """The runtime arguments, the constexpr ones and the launch options of a launch."""
        arguments, options = self.bind(args, kwargs)
        constants = {n: tl.unwrap(v) for n, v in arguments.items() if n in self.constexprs}
        runtime = {n: v for n, v in arguments.items() if n not in self.constexprs}
        for name, value in runtime.items():
            argument_type(value, name)
        return runtime, constants, options

    def compiled(self, runtime: dict, constants: dict, options: dict, target=None):
        """The compiled kernel for this specialisation and target: on first use loaded from the disk
        cache, else compiled (disk.py)."""
        signature = {n: argument_type(v, n) for n, v in runtime.items()}
        target = target or launch_target(runtime)
        equal_to_1 = tuple(n for n, v in runtime.items()
                           if type(v) is int and v == 1 and n not in self.do_not_specialize)
        key = (tuple((str(t), _device(v)) for t, v in zip(signature.values(), runtime.values())), equal_to_1,
               tuple((n, _hashable(v)) for n, v in constants.items()),
               tuple(sorted(options.items(), key=lambda kv: kv[0])), target)
        if key not in self.cache:
            self.cache[key] = _disk().obtain(self, signature, constants,
                                             {**options, "target": target, "equal_to_1": equal_to_1})
        return self.cache[key]


def _disk():
    """The compiler behind the disk cache (disk.py), imported on first compile: interpret mode never
    needs it, and a copy without it says how to run kernels."""
    try:
        from . import compiler, disk  # noqa: F401 - compiler: present, or the error below
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.compiler":
            raise
        raise RuntimeError("babytriton.triton has no compiler: set BABYTRITON_INTERPRET=1 to run kernels in "
                           "the interpreter") from None
    return disk


def _hashable(value):
    return value if isinstance(value, (int, float, str, bool, tl.dtype, type(None))) else repr(value)


def _device(value):
    return str(value.device) if isinstance(value, torch.Tensor) else None


def argument_type(value, name: str = "?") -> tl.dtype:
    """A runtime argument's type in the kernel: a tensor is a pointer to its dtype; numbers as
    semantics.argument_dtype says."""
    if isinstance(value, torch.Tensor):
        return tl.pointer_type(tl.from_torch(value.dtype))
    try:
        return semantics.argument_dtype(value)
    except Diagnostic as e:
        raise TypeError(f"argument {name!r}: {e}") from None


def launch_target(runtime: dict) -> str:
    """'cuda' when the tensor arguments live on a GPU, 'cpu' when on the CPU; mixing them is an error."""
    devices = {v.device.type for v in runtime.values() if isinstance(v, torch.Tensor)}
    if len(devices) > 1:
        raise ValueError(f"a kernel's tensors must be on one device, got {sorted(devices)}")
    return "cuda" if devices == {"cuda"} else "cpu"


def launch_grid(grid, arguments: dict) -> tuple:
    """The grid as three ints: a tuple of one to three, or a callable of the meta-parameters giving one."""
    if callable(grid):
        grid = grid(dict(arguments))
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(grid) <= 3:
        raise ValueError(f"a grid has one to three dimensions, got {grid}")
    grid = tuple(operator.index(tl.unwrap(g)) for g in grid) + (1,) * (3 - len(grid))
    if min(grid) < 0:
        raise ValueError(f"a grid's sizes cannot be negative, got {grid}")
    return grid


def jit(fn=None, **options):
    """`@triton.jit` (or `@triton.jit(do_not_specialize=[...])`)."""
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)


# --- meta-parameter choice --------------------------------------------------------------------------

class Config:
    """One choice of meta-parameters (`kwargs`) and launch options, for `autotune`."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
        self.kwargs = dict(kwargs)
        self.num_warps, self.num_stages, self.num_ctas, self.maxnreg = num_warps, num_stages, num_ctas, maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self) -> dict:
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages, "num_ctas": self.num_ctas}
        if self.maxnreg is not None:
            options["maxnreg"] = self.maxnreg
        return {**self.kwargs, **options}

    def __repr__(self):
        return ", ".join(f"{k}: {v}" for k, v in self.all_kwargs().items())


def _base(fn) -> JITFunction:
    while not isinstance(fn, JITFunction):
        fn = fn.fn
    return fn


class Autotuner:
    """`@triton.autotune(configs, key)`: the first launch for each value of the `key` arguments times
    every config and keeps the fastest."""

    def __init__(self, fn, configs, key, reset_to_zero=None, restore_value=None, warmup=None, rep=None, **_):
        self.fn, self.configs, self.key = fn, list(configs), list(key)
        self.reset_to_zero, self.restore_value = list(reset_to_zero or []), list(restore_value or [])
        self.warmup, self.rep = warmup or 25, rep or 100
        self.cache: dict = {}
        self.best_config = None
        self.__name__ = fn.__name__

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, **kwargs):
        arguments, _ = _base(self.fn).bind(args, dict(kwargs), partial=True)
        key = tuple(_key_value(arguments.get(k)) for k in self.key)
        if key not in self.cache:
            self.cache[key] = self._tune(args, kwargs, grid, arguments)
        self.best_config = self.cache[key]
        return self._launch(self.best_config, args, kwargs, grid, arguments)

    def _launch(self, config, args, kwargs, grid, arguments):
        if config.pre_hook is not None:
            config.pre_hook({**arguments, **config.kwargs})
        return self.fn.run(*args, grid=grid, **{**kwargs, **config.all_kwargs()})

    def _tune(self, args, kwargs, grid, arguments):
        if len(self.configs) == 1:
            return self.configs[0]
        saved = {n: arguments[n].clone() for n in self.restore_value}
        timings = {}
        for config in self.configs:
            def launch(config=config):
                for n in self.reset_to_zero:
                    arguments[n].zero_()
                self._launch(config, args, kwargs, grid, arguments)
            timings[id(config)] = _time_once(launch, None, None) if interpret_mode() else \
                do_bench(launch, warmup=self.warmup, rep=self.rep)
            for n, value in saved.items():
                arguments[n].copy_(value)
        for n in self.reset_to_zero:  # the tuning runs' sums must not reach the real run
            arguments[n].zero_()
        return min(self.configs, key=lambda c: timings[id(c)])


def _key_value(value):
    return value.dtype if isinstance(value, torch.Tensor) else value


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, warmup=None, rep=None,
             **options):
    """`@triton.autotune(configs=[triton.Config(...)], key=['M', 'N'])` over a `@triton.jit` kernel."""
    if prune_configs_by:
        raise NotImplementedError("triton.autotune's prune_configs_by is not supported")
    return lambda fn: Autotuner(fn, configs, key, reset_to_zero, restore_value, warmup, rep, **options)


class Heuristics:
    """`@triton.heuristics({'NAME': lambda args: ...})`: meta-parameters computed from the arguments."""

    def __init__(self, fn, values: dict):
        self.fn, self.values = fn, dict(values)
        self.__name__ = fn.__name__

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, **kwargs):
        base = _base(self.fn)
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS and k not in base.arg_names}
        known = dict(zip(base.arg_names, args))
        known.update(kwargs)
        for name, rule in self.values.items():
            kwargs[name] = rule({**known, **kwargs})
        return self.fn.run(*args, grid=grid, **kwargs, **options)


def heuristics(values: dict):
    return lambda fn: Heuristics(fn, values)


# --- host helpers -----------------------------------------------------------------------------------

def cdiv(x: int, y: int) -> int:
    """x / y rounded up."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """`fn`'s run time in milliseconds, as Triton's: `warmup` and `rep` are budgets in milliseconds,
    turned into counts from a first estimate; on a GPU each run is timed with CUDA events after the L2
    cache is flushed, on the CPU with the wall clock. `quantiles` gives those instead of `return_mode`."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    flush = torch.empty(256 * 2 ** 20 // 4, dtype=torch.int32, device="cuda") if cuda else None
    fn()
    estimate = statistics.fmean(_time_once(fn, flush, None) for _ in range(5))
    for _ in range(int(warmup / max(estimate, 1e-3))):
        fn()
    times = [_time_once(fn, flush, grad_to_none) for _ in range(max(1, int(rep / max(estimate, 1e-3))))]
    if quantiles is not None:
        result = torch.tensor(times, dtype=torch.float64).quantile(torch.tensor(quantiles, dtype=torch.float64))
        return result.tolist()[0] if len(quantiles) == 1 else result.tolist()
    return {"mean": statistics.fmean, "median": statistics.median, "min": min, "max": max}[return_mode](times)


def _time_once(fn, flush, grad_to_none) -> float:
    for t in grad_to_none or ():
        t.grad = None
    if flush is None:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    flush.zero_()  # what the previous run left in L2 would flatter this one
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)
