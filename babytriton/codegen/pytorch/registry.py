"""The torch-name table: each torch function, `torch.nn.functional` function and tensor method that
@jit code may call, mapped to one rule written over a library.Builder.

A rule takes the builder first and torch's own parameters after it (`softmax(b, input, dim, dtype)`),
and builds its result from the Relax operators of the library table (`op(b, "exp", x)`), so the
compiler (library.RelaxBuilder: Relax) and the eager reference (eager/ops.py, TorchBuilder: torch) run
the same rule, as Helion and Dynamo map torch's vocabulary onto their own IR.
"""
from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass

from ...core.errors import Diagnostic
from .. import library


@dataclass(frozen=True, eq=False)
class Entry:
    """One torch name: its rule and the signature users call it with (the rule's, less the builder)."""
    name: str                    # how messages name it: "torch.softmax", "Tensor.transpose"
    rule: typing.Callable
    signature: inspect.Signature
    refused: bool = False        # the rule only explains why @jit code cannot have it (random numbers)

    def __repr__(self):
        return f"<torch rule {self.name}>"


@dataclass(frozen=True, eq=False)
class BoundMethod:
    """`x.exp` before it is called: a tensor method's rule with the tensor as its first argument."""
    entry: Entry
    tensor: object
    attr: str

    def __repr__(self):
        return f"<tensor method .{self.attr}()>"


# id(torch callable) -> (the callable, kept alive so its id stays its own; its entry)
FUNCTIONS: dict[int, tuple[object, Entry]] = {}
METHODS: dict[str, Entry] = {}   # tensor method name -> entry (the tensor is its first argument)
PROPERTIES: dict[str, typing.Callable] = {}  # tensor attribute read without a call (`x.mT`) -> rule(b, x)


def torch_rule(*functions, methods: tuple[str, ...] = (), name: str | None = None, refused: bool = False):
    """Register the decorated rule for these torch callables and tensor method names (`refused`: a
    rule that raises why @jit code cannot have the name, so that listings leave it out)."""
    def register(rule):
        params = list(inspect.signature(rule).parameters.values())[1:]  # less the builder
        first = functions[0] if functions else None
        shown = name or (f"torch.{first.__name__}" if first is not None else f"Tensor.{methods[0]}")
        entry = Entry(shown, rule, inspect.Signature(params), refused)
        for fn in functions:
            FUNCTIONS[id(fn)] = (fn, entry)
        for method in methods:
            METHODS[method] = entry
        return rule
    return register


# Where users reach torch's functions, for listing the table by the names they write.
PUBLIC_MODULES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg")


def torch_names(refused: bool = False) -> list[str]:
    """Every torch name @jit code takes, as users write it (`torch.nn.functional.silu`, `Tensor.view`);
    with `refused`, the names it knows but refuses, saying why when called (random numbers)."""
    found = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        found |= {f"{module_name}.{name}" for name, value in vars(module).items()
                  if not name.startswith("_") and (entry := resolve(value)) is not None and entry.refused == refused}
    methods = {f"Tensor.{m}" for m, entry in METHODS.items() if entry.refused == refused}
    return sorted(found) + sorted(methods | (set() if refused else {f"Tensor.{p}" for p in PROPERTIES}))


def resolve(value) -> Entry | None:
    """The entry a compile-time value stands for (`torch.exp`, `F.gelu`, `torch.Tensor.exp`), if any."""
    found = FUNCTIONS.get(id(value))
    return found[1] if found is not None and found[0] is value else None


def torch_property(*names: str):
    """Register the decorated rule(b, x) as the value of these tensor attributes (`x.device`, `x.mT`)."""
    def register(rule):
        PROPERTIES.update(dict.fromkeys(names, rule))
        return rule
    return register


def tensor_property(b, tensor, attr: str):
    """(True, value) of a tensor attribute torch reads without a call; (False, None) if it has none."""
    rule = PROPERTIES.get(attr)
    return (False, None) if rule is None else (True, rule(b, tensor))


def method(tensor, attr: str) -> BoundMethod | None:
    entry = METHODS.get(attr)
    return None if entry is None else BoundMethod(entry, tensor, attr)


def call(b, entry: Entry, args: list, kwargs: dict):
    """`entry(*args, **kwargs)` on the builder's values: the arguments bound to torch's signature."""
    try:
        bound = entry.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise Diagnostic(f"{entry.name}(): {e}") from None
    return entry.rule(b, *bound.args, **bound.kwargs)


def call_method(b, bound: BoundMethod, args: list, kwargs: dict):
    return call(b, bound.entry, [bound.tensor, *args], kwargs)


# ----------------------------------------------------------------------------------------------
# what the rules share
# ----------------------------------------------------------------------------------------------
def op(b, name: str, *args, **kwargs):
    """The library's Relax operator `name` on the builder's values, with every rule of library.apply."""
    return library.apply(b, library.table()[name], list(args), kwargs)


def tensor(b, value, where: str):
    """`value`, which must be a tensor (torch's functions take no Python numbers where they take input:
    neither a number written in the code nor one the caller passes, such as an `int` parameter)."""
    if b.is_tensor(value) and b.is_weak(value):
        kind = "bool" if b.dtype(value) == "bool" else "float" if "float" in b.dtype(value) else "int"
        raise Diagnostic(f"{where} takes a tensor, got a Python {kind} computed at run time (torch refuses "
                         f"numbers here too: torch.tensor(...) makes one a tensor)")
    if not b.is_tensor(value):
        raise Diagnostic(f"{where} takes a tensor, got {b.describe(value)}")
    return value


def dim(b, x, d: int, where: str, extra: int = 0) -> int:
    """A torch `dim` as a non-negative axis of x (which has `extra` more axes after the op)."""
    ndim = max(b.ndim(x) + extra, 1)
    if isinstance(d, bool) or not isinstance(d, int):
        raise Diagnostic(f"{where}: dim must be an int, got {b.describe(d)}")
    if not -ndim <= d < ndim:
        raise Diagnostic(f"{where}: dim {d} is out of range for a {b.ndim(x)}-d tensor "
                         f"(expected to be in range of [{-ndim}, {ndim - 1}])")
    return d % ndim


def dims(b, x, d, where: str) -> list[int] | None:
    """A torch `dim` that may be None (every axis), an int or a sequence of ints, as axes of x."""
    if d is None:
        return None
    items = d if isinstance(d, (tuple, list)) else [d]
    return [dim(b, x, i, where) for i in items]
