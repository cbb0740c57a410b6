"""What the compiler knows of a @jit function before any call (`FunctionInfo`): its parsed source,
signature and parameters, its options, and the options code generation reads, resolved once
(`CodegenOptions`). Code generation, the backends, the cache and the eager reference read a function
through this, never through the driver's `JITFunction`."""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect

import tvm

from . import devices
from ..core import targets
from .arguments import ArgSpec, Specialise, arg_spec, check_symbolic_sizes, static_spec, without_layouts
from ..core.errors import CompilationError
from .source import parse_function
from ..core.types import Param, params_from_signature


@dataclasses.dataclass(frozen=True)
class CodegenOptions:
    """The options code generation reads, resolved from the `@jit` options once per function."""
    target: tvm.target.Target
    device_kind: str        # "cpu" or "cuda": where code outside `with bt.device(...)` blocks runs
    schedule: str
    unroll: int             # loops of at most this many iterations are unrolled
    matmul_offload: targets.MatmulOffload   # which matrix products the pipeline hands to torch.matmul


class FunctionInfo:
    """A Python function as the compiler reads it: parsed once at decoration; its target resolved
    at the first compile (resolving "gpu" asks the driver for the local GPU)."""

    def __init__(self, fn, options: dict):
        self.fn = fn
        self.name = fn.__name__
        self.options = options
        self.parsed = parse_function(fn)
        try:  # `from __future__ import annotations` makes every annotation a string
            self.signature = inspect.signature(fn, eval_str=True)
        except Exception:  # noqa: BLE001 - a name only the closure knows: reported per parameter below
            self.signature = inspect.signature(fn)
        self.params = params_from_signature(self.signature, self._param_error)
        self.heterogeneous = devices.uses_device_blocks(self.parsed.tree)   # `with bt.device(...)` blocks
        # Unannotated number parameters the code needs as compile-time values (arguments.Specialise):
        # keyed on their value from then on. Replaced whole, never mutated (read without a lock).
        self.specialised: frozenset = frozenset()

    def _param_error(self, name: str, message: str) -> CompilationError:
        node = next((a for a in ast.walk(self.parsed.tree.args) if isinstance(a, ast.arg) and a.arg == name),
                    self.parsed.tree)
        return self.parsed.source_map.error(node, message)

    @functools.cached_property
    def target(self) -> tvm.target.Target:
        return targets.resolve_target(self.options["target"])

    @functools.cached_property
    def device_kind(self) -> str:
        return targets.device_kind(self.target)

    @functools.cached_property
    def codegen_options(self) -> CodegenOptions:
        schedule = self.options["schedule"]
        return CodegenOptions(self.target, self.device_kind, schedule, self.options["unroll"],
                              targets.offloaded_matmuls(self.target, schedule))

    # -- arguments ------------------------------------------------------------------------------
    def bind(self, args, kwargs) -> tuple:
        """Positional and keyword arguments as one tuple in parameter order, defaults filled in."""
        unknown = [k for k in kwargs if k not in self.signature.parameters]
        if unknown:  # before any missing argument: the misspelt keyword is the mistake
            hint = difflib.get_close_matches(unknown[0], self.signature.parameters, n=1)
            raise TypeError(f"{self.name}({', '.join(p.name for p in self.params)}): got an unexpected keyword "
                            f"argument {unknown[0]!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            names = ", ".join(p.name for p in self.params)
            raise TypeError(f"{self.name}({names}): {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def specs(self, args) -> tuple[ArgSpec, ...]:
        """The arguments checked against the annotations, as the specs a compiled version is keyed on."""
        specs = tuple(arg_spec(p, a, self.name, p.name in self.specialised) for p, a in zip(self.params, args))
        check_symbolic_sizes(self.params, list(args), self.name)
        if self.heterogeneous:
            specs = devices.with_devices(self.params, specs, args, self.name, self.device_kind)
        if self.heterogeneous or self.options["backend"] == "tir":   # they index the caller's memory themselves
            specs = without_layouts(specs)
        return specs

    def specialise(self, signal: Specialise) -> None:
        """Key these parameters on their value from now on; the code's error if none is new (it
        needs a compile-time value that no specialisation gives)."""
        names = signal.names - self.specialised
        if not names:
            raise signal.error
        self.specialised = self.specialised | names

    def static_specs(self) -> tuple[ArgSpec, ...]:
        """The specs of the annotations alone (`compile()` with no arguments)."""
        specs = tuple(static_spec(p) if p.kind != "constexpr" or p.default is inspect.Parameter.empty
                      else ArgSpec("constexpr", value=p.default) for p in self.params)
        if self.heterogeneous:
            specs = devices.with_devices(self.params, specs, None, self.name, self.device_kind)
        return specs


# Modules whose Python functions are library code, never inlined from their source: torch's own
# (its names are mapped by codegen.pytorch or refused), and the compiler's.
NOT_INLINED = ("torch", "tvm", "tvm_ffi", "numpy", "babytriton", "triton", "functools", "typing")


class PlainFunction:
    """An undecorated Python function @jit code calls (`rotate_half(q)`), as the inliner, the cache
    and the eager reference read it: like a FunctionInfo, every parameter "auto" and unchecked (its
    annotations are not babytriton's), parsed on first use, with no options of its own."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.options: dict = {}
        self.signature = inspect.signature(fn)   # annotations unevaluated: they are not checked
        self.params = [Param(p.name, "auto") for p in self.signature.parameters.values()]

    @functools.cached_property
    def parsed(self):
        return parse_function(self.fn)


def plain_function(fn) -> PlainFunction | None:
    """The inliner's view of `fn` if @jit code inlines it (a `def` of the user's, not a lambda, not
    torch's, numpy's or the compiler's own), else None."""
    if not inspect.isfunction(fn) or fn.__name__ == "<lambda>":
        return None
    module = (getattr(fn, "__module__", None) or "").split(".")[0]
    return None if module in NOT_INLINED else _plain_view(fn)


@functools.lru_cache(maxsize=None)
def _plain_view(fn) -> PlainFunction:
    return PlainFunction(fn)  # one per function: the eager reference and the cache key by it


class Decorated:
    """Base of the driver's decorated function: code generation (inlining a call), the cache (keying
    a callee) and the eager reference recognise a @jit function by this, and read its `info`."""
    info: FunctionInfo
