"""`@jit`: the decorator, the in-memory cache of compiled versions, and the call path."""
from __future__ import annotations

import ast
import dataclasses
import difflib
import threading

import numpy as np
import torch
import tvm

from .torch import autograd
from .runtime import cache
from .core import config, targets
from .frontend import devices
from . import schedules
from .eager import reference as eager
from .backends import relax as relax_backend
from .autodiff import backward as backward_
from .torch import library as torch_library
from . import explain as explaining
from .frontend.arguments import ArgSpec, Specialise, unwrap
from .codegen import kernels, mutation
from .core.errors import CompilationError
from .frontend.function import Decorated, FunctionInfo
from .versions import Versions
from .runtime.kernel import Kernel
from .core.types import TORCH_TO_NAME, Param, Tensor
from .torch.library import tracing as _tracing

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


def grad_for(kernel):
    """`@bt.grad_for(kernel)` above a function computing the vector-Jacobian product of a TensorIR
    kernel (`@T.prim_func`) called from @jit code, so that functions calling it are differentiable.

    The function is called `grad(*inputs, *grad_outputs)`: the kernel's input tensors as the call
    passed them (output placeholders left out), then the gradient of each floating-point output,
    in order. It returns the gradient of each floating-point input, in order: one tensor, or a
    tuple of them (shapes and dtypes of the inputs). A @jit function is taken as it is; a plain one
    is wrapped with `bt.jit()`. Registering again for the same kernel replaces the gradient.

    Where it is straight-line code calling no kernel, it is compiled into the backward of every
    function calling the kernel: the call becomes Relax's `call_tir_with_grad`, whose gradient rule
    writes this function's Relax in place, fused with the rest of the backward. Otherwise that
    backward runs torch autograd over the eager reference (a GradientFallbackWarning says so once),
    where the kernel's call is a torch.autograd.Function whose backward calls this function; so
    does `create_graph=True`, which differentiates this function in turn.
    """
    if not kernels.is_kernel(kernel):
        raise TypeError(f"bt.grad_for takes a TensorIR kernel (a @T.prim_func), got {type(kernel).__name__}")

    def register(fn):
        jitfn = fn if isinstance(fn, Decorated) else jit(fn)
        kernels.set_gradient(kernel, jitfn)
        return jitfn
    return register


def check_options(options: dict) -> None:
    for key in options:
        if key not in OPTIONS:
            hint = difflib.get_close_matches(key, OPTIONS, n=1)
            raise TypeError(f"jit() got an unknown option {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                            + f" (options: {', '.join(OPTIONS)})")
    merged = {**OPTIONS, **options}
    targets.check_target(merged["target"])
    if merged["schedule"] not in schedules.SCHEDULES:
        raise ValueError(f"unknown schedule {merged['schedule']!r}; use one of {', '.join(schedules.SCHEDULES)}")
    if merged["backend"] not in BACKENDS:
        raise ValueError(f"unknown backend {merged['backend']!r}; use one of {', '.join(BACKENDS)}")
    for count in ("unroll", "trials"):
        value = merged[count]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{count} is a non-negative int, got {value!r}")
    for flag in ("verbose", "cache"):
        if not isinstance(merged[flag], bool):
            raise TypeError(f"{flag} is True or False, got {merged[flag]!r}")


def _eager_when_empty(run, jitfn, args, positions: list[int]):
    """A GPU call whose symbolic-size tensors hold no element runs eagerly (torch's answer): TVM's
    CUDA launch of a grid of 0 blocks fails, and a kernel can't guard itself around its thread syncs.
    Static sizes of 0 are handled when compiling (the kernel has no body). Decided once per runner:
    the call key holds each tensor's exact shape."""
    if any(0 in unwrap(args[i]).shape for i in positions):
        return lambda args: jitfn.eager(*args)
    return run


def _no_gradient_through(run, name: str, held: list[str]):
    """A call with bt.Tensor arguments holding tensors that require grad: an error while grad mode is
    on (they would silently get no gradient), the plain call otherwise."""
    def call(args):
        if torch.is_grad_enabled():
            raise TypeError(f"{name}(): the bt.Tensor argument(s) {', '.join(held)} hold tensors that require "
                            "grad, which would get no gradient: pass the torch tensor itself to differentiate "
                            "it (or `.detach()` it)")
        return run(args)
    return call


def _value_key(value, is_constexpr: bool):
    """One argument's part of the call key: what picks its runner (a tensor's dtype, exact shape,
    device, requires_grad and, where it is not contiguous, strides: its layout, frontend/layouts.py;
    a constexpr's value; another value's type)."""
    kind = type(value)
    if kind is torch.Tensor or isinstance(value, torch.Tensor):
        return value.dtype, value.shape, value.device, value.requires_grad, value.is_contiguous() or value.stride()
    if is_constexpr:
        return kind, value
    if kind is np.ndarray:
        return value.dtype, value.shape
    if kind is Tensor:
        data = value.data
        return (kind, type(data), getattr(data, "dtype", None), getattr(data, "shape", None),
                getattr(data, "device", None), getattr(data, "requires_grad", False))
    return kind


def _key_function(constexpr: tuple[bool, ...]):
    """The call key (one `_value_key` per argument) as one generated function for this parameter
    list: a torch tensor's part is read inline, so that the cached call path costs no Python call
    or loop per argument. Called with exactly one argument per parameter."""
    names = [f"a{i}" for i in range(len(constexpr))]
    parts = [f"(({n}.dtype, {n}.shape, {n}.device, {n}.requires_grad, {n}.is_contiguous() or {n}.stride()) "
             f"if type({n}) is T else part({n}, {c}))"
             for n, c in zip(names, constexpr)]
    code = (f"def call_key(args):\n    ({''.join(n + ', ' for n in names)}) = args\n"
            f"    return ({''.join(p + ', ' for p in parts)})\n")
    env = {"T": torch.Tensor, "part": _value_key}
    exec(code, env)  # noqa: S102 - the text is made above from parameter positions only
    return env["call_key"]


class JITFunction(Decorated):
    """A Python function taken over by the compiler; calling it compiles (once per key) and runs."""

    def __init__(self, fn, **options):
        check_options(options)
        self.info = info = FunctionInfo(fn, {**OPTIONS, **options})
        # What tests and users read of the function (all fixed at decoration).
        self.options, self.fn, self.parsed, self.signature = info.options, fn, info.parsed, info.signature
        self.params, self.heterogeneous = info.params, info.heterogeneous
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._nparams = len(self.params)
        self._call_key = self._key_function()
        self._fallbacks: set = set()               # backward fallbacks warned about
        self._fallback_of: dict = {}                # (specs, autograd.Variant) -> why its backward is eager
        self._lock = threading.RLock()
        self._versions = Versions(info, self._lock)   # the compiled forwards and backwards
        self.stats = self._versions.stats
        # Short updates (runner tables), never held while compiling: a call that finds its
        # version does not wait for another thread's compile. Exact without the GIL too.
        self._update_lock = threading.Lock()
        # What the cached call path reads, replaced whole (one atomic store) when a global changes:
        # (a check that the globals the function reads still resolve to the objects the runners were
        # made with — None when it reads none, _always before the first call —, the globals key,
        # the runners for those values: call key -> run).
        reads_names = bool(cache._free_paths(self.parsed.tree))
        self._state: tuple = (_always if reads_names else None, (), {})
        self._runner_tables: dict[tuple, dict] = {}
        # BABYTRITON_INTERPRET=1 at decoration: every call runs eagerly. Read here, once, so that
        # the cached call path costs one attribute test, not an environment lookup.
        self._interpret = config.interpret_requested()
        self._specs = info.specs   # the arguments checked against the annotations, as specs

    def _key_function(self):
        """The call key function: constexpr and specialised parameters keyed on their value."""
        self._keyed_on = specialised = self.info.specialised
        return _key_function(tuple(p.kind == "constexpr" or p.name in specialised for p in self.params))

    def _versioned(self, args) -> tuple:
        """The specs and compiled version for these arguments. Where the code needs a run-time
        scalar parameter as a compile-time value (arguments.Specialise), the parameter is keyed on
        its value from now on (one version per value, as torch.compile does) and this compiles again."""
        while True:
            specs = self._specs(args)
            try:
                return specs, self._kernel(specs)
            except Specialise as signal:
                with self._lock:
                    (signal.callee or self.info).specialise(signal)   # raises the code's error when nothing is new

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _tracing():   # inside torch.compile / torch.export: the call is the function's torch op
            return torch_library.call_in_graph(self, args, kwargs)
        if self._interpret:
            return eager.run(self.info, args, kwargs)
        if kwargs or len(args) != self._nparams:
            args = self.info.bind(args, kwargs)
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
            changed, values = cache.global_state(self.info)   # one reading: the check and the values agree
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
        return eager.run(self.info, args, kwargs)

    def _prepare(self, args, key, values: tuple, runners: dict):
        """First call with these exact argument types: check them, find or compile, make a runner
        (remembered in `runners`, the table for the global `values`, if it was compiled with them)."""
        self._specs(args)  # the arguments' own errors first
        if not self.heterogeneous:  # device blocks take arguments from either device
            devices.check_devices(self.params, args, self.info.device_kind, self.__name__)
        specs, kernel = self._versioned(args)
        if self._keyed_on is not self.info.specialised:  # a parameter got specialised: calls keyed anew
            with self._lock:
                self._call_key = self._key_function()
            key = None if key is None else self._call_key(args)
        kernel.check_sizes(args)
        run = kernel.runner(args)
        written = mutation.positions(kernel, self.params)  # parameters updated in place: copied back after a call
        if written:
            run = mutation.write_back(run, written)
        symbolic = [i for i, s in enumerate(specs) if s.kind == "tensor" and not all(isinstance(d, int) for d in s.shape)]
        if kernel.device_kind == "cuda" and symbolic and not self.heterogeneous:
            run = _eager_when_empty(run, self, args, symbolic)
        held = [p.name for p, a in zip(self.params, args)
                if isinstance(a, Tensor) and isinstance(a.data, torch.Tensor) and a.data.requires_grad]
        requires = autograd.requires_grad(args)
        if any(requires):
            if kernel.backend == "tir":
                names = ", ".join(p.name for p, r in zip(self.params, requires) if r)
                raise TypeError(f"{self.__name__}(): backend='tir' functions write their results into their "
                                f"arguments and have no gradient, but {names} require grad; pass tensors that "
                                "don't (`.detach()`), or compile with backend='relax'")
            run = autograd.Differentiable(self, kernel, run, specs, requires)
            if written:
                run = mutation.no_grad_only(run, self.__name__, self.params, written, requires)
        if held:
            run = _no_gradient_through(run, self.__name__, held)
        if key is not None and kernel.globals_key == values:  # else a global changed meanwhile
            with self._update_lock:
                if len(runners) >= MAX_RUNNERS:
                    runners.clear()
                runners[key] = run
        return run

    # -- compiling ----------------------------------------------------------------------------
    def compile(self, *args, **kwargs) -> Kernel:
        """The compiled version for these arguments; with none, for the annotations alone."""
        if not args and not kwargs and self.params:
            return self._kernel(self.info.static_specs())
        if kwargs or len(args) != self._nparams:
            args = self.info.bind(args, kwargs)
        return self._versioned(args)[1]

    def _specs_for(self, args, kwargs) -> tuple[ArgSpec, ...]:
        if not args and not kwargs and self.params:
            return self.info.static_specs()
        if kwargs or len(args) != self._nparams:
            args = self.info.bind(args, kwargs)
        return self.info.specs(args)

    def _memory_key(self, specs: tuple[ArgSpec, ...]) -> tuple:
        """The in-memory key of a version: the argument specs and the current values of the globals."""
        changed, values, _ = self._state
        if changed is not None and changed():
            _, values, _ = self._globals_changed()
        return specs, values

    def _kernel(self, specs: tuple[ArgSpec, ...]) -> Kernel:
        return self._versions.forward(self._memory_key(specs))

    def backward_kernel(self, specs: tuple[ArgSpec, ...], variant: autograd.Variant, grads, saved=()) -> Kernel:
        """The compiled backward of the version for `specs` (static sizes), differentiating `variant`:
        its parameters are the forward's, a tensor like each of `saved` (the training forward's saved
        values, when `variant.part` is "backward") and a gradient like each tensor in `grads`."""
        params = self._exact_params(specs)
        params += [Param(f"saved{i}", "tensor", Tensor(tuple(t.shape), TORCH_TO_NAME[t.dtype]))
                   for i, t in enumerate(saved)]
        params += [Param(f"d_out{i}", "tensor", Tensor(tuple(g.shape), TORCH_TO_NAME[g.dtype]))
                   for i, g in enumerate(grads)]
        specs = specs + tuple(ArgSpec("tensor", tuple(t.shape), TORCH_TO_NAME[t.dtype]) for t in [*saved, *grads])
        return self._derived_kernel(specs, variant, params)

    def training_kernel(self, specs: tuple[ArgSpec, ...], variant: autograd.Variant) -> Kernel:
        """The training forward of the version for `specs` (static sizes): `<name>_forward_saving`
        returning (the result, (the small values its backward reads...)). Raises
        relax_backend.NothingSaved when the backward reads none (calls run the plain forward)."""
        return self._derived_kernel(specs, dataclasses.replace(variant, part="forward"), self._exact_params(specs))

    def _exact_params(self, specs: tuple[ArgSpec, ...]) -> list[Param]:
        """The parameters, each tensor annotated with this call's exact shape: a backward or training
        forward Kernel (compiled for static sizes) can be called directly."""
        return [Param(p.name, "tensor", Tensor(s.shape, s.dtype)) if s.kind == "tensor" else p
                for p, s in zip(self.params, specs)]

    def _derived_kernel(self, specs: tuple[ArgSpec, ...], variant: autograd.Variant, params) -> Kernel:
        """A backward or training forward (`variant.part`) of the version for `specs` (Versions.derived)."""
        return self._versions.derived(self._memory_key(specs), variant, params)

    def training_forward(self, *args, **kwargs) -> Kernel:
        """The forward that calls with tensors requiring grad run for these arguments: the training
        forward returning (result, (saved values...)) when the backward reads small forward values
        (row statistics), else the plain forward (its backward recomputes everything)."""
        specs, variant, _, saved = self._backward_request(args, kwargs)
        if not saved:
            return self._kernel(specs)
        return self.training_kernel(specs, variant)

    def backward(self, *args, **kwargs) -> Kernel:
        """The compiled backward for a call with these arguments (tensors that require grad are the
        ones differentiated; with none, every floating-point tensor): a Kernel with its own stages,
        source and fusion map, taking the arguments then the gradient of each floating-point result.
        Where the backward cannot be compiled (calls run torch autograd over the eager reference), a
        CompilationError at the construct says why."""
        specs, variant, grads, saved = self._backward_request(args, kwargs)
        try:
            return self.backward_kernel(specs, variant, grads, saved)
        except backward_.NotDifferentiable as e:
            failed = e
        # raised outside the `except`: no internal exception chained
        if failed.kernel is not None and kernels.gradient_of(failed.kernel) is None:
            raise self.not_differentiable(failed)
        raise self.parsed.source_map.error(
            failed.node, f"the backward of '{self.__name__}' cannot be compiled because of {failed.what}; calls "
                         "differentiate it with torch autograd over the eager reference")

    def _backward_request(self, args, kwargs) -> tuple:
        """What the backward of a call with these arguments is compiled for: the static specs, the
        autograd.Variant, a (meta) tensor like each result that gets a gradient, read from the
        forward's return type (so that nothing runs: a GPU version needs no GPU), and one like each
        value the training forward saves for it (none: the backward recomputes the forward)."""
        if kwargs or len(args) != self._nparams:
            args = self.info.bind(args, kwargs)
        requires = autograd.requires_grad(args)
        if not any(requires):
            requires = tuple(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args)
        specs = autograd.concrete(self._versioned(args)[0], args)
        results = autograd.result_types(self._kernel(specs), self.__name__)
        outputs = tuple(r is not None and r.is_floating_point() for r in results)
        variant = autograd.Variant(requires, outputs, autograd.kernel_gradients(self.info))
        grads = [r for r, o in zip(results, outputs) if o]
        kernel = self._kernel(specs)
        if kernel.vm_devices is not None or self.heterogeneous or not config.save_for_backward(kernel.device_kind):
            return specs, variant, grads, []
        try:
            training = self.training_kernel(specs, variant)
        except (relax_backend.NothingSaved, backward_.NotDifferentiable):
            return specs, variant, grads, []
        saved = autograd.saved_types(training)
        return specs, dataclasses.replace(variant, part="backward"), grads, saved

    def not_differentiable(self, e) -> CompilationError:
        """The error of a backward through a TensorIR kernel that has no @bt.grad_for gradient."""
        node = e.node
        name = ast.unparse(node.func) if isinstance(node, ast.Call) else e.what.split("`")[1]
        return self.parsed.source_map.error(node, kernels.no_gradient_message(name))

    def as_torch_op(self, name: str | None = None, *, results: int | None = None, **constexprs):
        """This function as a torch custom operator, `torch.ops.babytriton.<name>` (default: its module
        and name), with its compiled backward as its autograd formula: one node to torch.compile and
        torch.export. Constexpr parameters are baked in by keyword (one op per set of values);
        `results` overrides the result count read from the `return` statements."""
        return torch_library.register(self, name, results, constexprs)

    def warn_fallback(self, what: str, node, version=None) -> None:
        """Once per function and construct: its backward runs on torch autograd over the eager reference."""
        where = self.parsed.source_map.describe(node) if node is not None else self.__name__
        if version is not None:
            self._fallback_of[version] = f"{what} at {where}"
        if (what, where) in self._fallbacks:
            return
        self._fallbacks.add((what, where))
        cache.warn(f"babytriton: the backward of '{self.__name__}' is not compiled: it runs torch autograd over "
                   f"the eager reference, because of {what} at {where}", autograd.GradientFallbackWarning)

    def explain(self, *args, backward: bool = False, **kwargs) -> explaining.Explanation:
        """Print and return the cache key's parts for these arguments, whether a compiled version
        exists in memory or on disk, and how it differs from the nearest existing version.
        With no arguments, for the annotations alone (as compile()). With `backward=True`, the same
        for the backward of a call with these arguments (as `f.backward(*args)`: it runs the forward
        once to know its results), and whether that backward falls back to torch autograd."""
        if backward:
            specs, variant, grads, saved = self._backward_request(args, kwargs)
            specs = specs + tuple(ArgSpec("tensor", tuple(g.shape), TORCH_TO_NAME[g.dtype]) for g in [*saved, *grads])
            memory = self._memory_key(specs)
            key = self._versions.cache_key(specs, variant)
            backwards = [k for (_, v), k in self._versions.backwards.items() if v.part != "forward"]
            result = explaining.explain(self.info, key, self._versions.backwards.get((memory, variant)),
                                        backwards, f"{self.__name__} (backward)",
                                        self._fallback_of.get((specs[:self._nparams], variant)))
            print(result.text)
            return result
        specs = self._specs_for(args, kwargs)
        kernel = self._versions.forwards.get(self._memory_key(specs))
        result = explaining.explain(self.info, self._versions.cache_key(specs), kernel,
                                    list(self._versions.forwards.values()))
        print(result.text)
        return result

    def target(self) -> tvm.target.Target:
        return self.info.target

    def cache_info(self) -> dict:
        """Compilations, versions and lookups: `hits`/`misses` count the first call with each new
        argument key (found in memory or not); later calls with a known key take the cached call
        path, which counts nothing (a counter there would cost every call)."""
        return dict(self.stats, versions=len(self._versions.forwards))

    def __repr__(self):
        return f"<babytriton.jit {self.__name__} target={self.options['target']!r}>"
