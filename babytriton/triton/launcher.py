"""The launch fast path of `kernel[grid](...)`: once a launch has been bound, checked and compiled, later
launches whose arguments have the same signature (tensor dtypes and devices, int ranges, constexpr and
option values, the same positional/keyword shape) skip binding, typing and keying, and go straight to
the compiled kernel with the argument order worked out once (back-to-back launches of a small kernel
are bound by this host time). Both steps, picking the arguments (`make_launcher`) and handing them to
the compiled function (`runner`), are generated Python with one statement per argument, as @jit's
runners are (runtime/kernel.py): a loop, list or call per argument cost a vector add's time twice over.
On a CPU the programs run on torch's OpenMP threads, as @jit's kernels do (runtime/threads.py)."""
from __future__ import annotations

import os

import torch

from ..runtime import threads
from ..runtime.kernel import _compiled
from .language import core as tl

_INT32 = range(-2 ** 31, 2 ** 31)
MAX_LAUNCHERS = 256   # per kernel: a loop over many sizes re-keys, it must not grow without bound


def launch_key(args: tuple, kwargs: dict, exact: tuple, by_value: frozenset):
    """What a launch's specialisation depends on, cheap to compute (map, not a generator: this is
    most of a fast launch's time): None when it cannot be keyed (more positional arguments than
    parameters: the slow path reports it). `exact`: per parameter, whether it keys by value. It may
    hold an unhashable constexpr: looking it up raises TypeError, and the slow path keys it by repr."""
    if len(args) > len(exact):
        return None
    parts = tuple(map(_part, args, exact))
    if not kwargs:
        return parts
    return parts, tuple(kwargs), tuple(map(_part, kwargs.values(), map(by_value.__contains__, kwargs)))


def _part(value, exact: bool):
    """One argument's share of the key: a tensor by dtype and device, a constexpr or option by value,
    an int by its kernel type and whether it is 1 (specialised), other numbers by type. The common
    types by `type(...) is` first: isinstance against torch.Tensor runs its metaclass's Python hook."""
    kind = type(value)
    if kind is torch.Tensor:
        return value.dtype, value.get_device()
    if exact and (kind is int or kind is bool):   # a constexpr's usual value: as below, less the Tensor hook
        return kind, value
    if not exact:
        if kind is int:
            return int, value == 1, -2 ** 31 <= value < 2 ** 31 or value >= 2 ** 63
        if kind is float:
            return float
    if isinstance(value, torch.Tensor):
        return value.dtype, value.get_device()
    if exact:
        value = tl.unwrap(value)
        return type(value), value
    if isinstance(value, int) and kind is not bool:
        return kind, value == 1, value in _INT32 or value >= 2 ** 63
    return kind


def keyer(count: int, names: tuple, exact: tuple, by_value: frozenset):
    """launch_key for launches of `count` positional arguments and keyword arguments `names` (in
    order), as one generated function (args, kwargs) -> key with each argument's `_part` inlined: a
    call per argument was a third of a small kernel's launch."""
    if count > len(exact):
        return lambda args, kwargs: None
    lines = ["def key(args, kwargs):"]
    values = [f"args[{i}]" for i in range(count)] + [f"kwargs[{name!r}]" for name in names]
    for i, (value, by) in enumerate(zip(values, [*exact[:count], *(n in by_value for n in names)])):
        lines += [f"    v = {value}", "    t = type(v)", "    if t is T:", f"        p{i} = v.dtype, v.get_device()"]
        if by:
            lines += ["    elif t is int or t is bool:", f"        p{i} = t, v"]
        else:
            lines += ["    elif t is int:", f"        p{i} = int, v == 1, -2147483648 <= v < 2147483648 or v >= {2 ** 63}",
                      "    elif t is float:", f"        p{i} = float"]
        lines += ["    else:", f"        p{i} = part(v, {bool(by)})"]
    parts = "".join(f"p{i}, " for i in range(count))
    named = "".join(f"p{i}, " for i in range(count, len(values)))
    lines.append(f"    return ({parts}), {names!r}, ({named})" if names else f"    return ({parts})")
    env = {"T": torch.Tensor, "part": _part}
    exec(_compiled("\n".join(lines) + "\n"), env)  # noqa: S102 - made from argument counts and names only
    return env["key"]


def make_launcher(compiled, names: list, args: tuple, kwargs: dict, runtime: dict, constants: dict, launch_grid):
    """A function (args, kwargs, grid) -> None launching `compiled` for launches keyed like this one:
    each runtime argument taken from its position, keyword or (fixed) default."""
    position = {name: i for i, name in enumerate(names[:len(args)])}
    env = {"run": compiled.launcher(), "three": _three, "launch_grid": launch_grid, "constants": dict(constants)}
    reads = []
    for i, (name, default) in enumerate(runtime.items()):
        if name in position:
            reads.append(f"args[{position[name]}]")
        elif name in kwargs:
            reads.append(f"kwargs[{name!r}]")
        else:
            env[f"d{i}"] = default
            reads.append(f"d{i}")
    values = "".join(f"v{i}, " for i in range(len(runtime)))
    meta = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(runtime))
    lines = ["def launch(args, kwargs, grid):",
             *(f"    v{i} = {read}" for i, read in enumerate(reads)),
             "    if callable(grid):",
             f"        grid = grid({{**constants, {meta}}})",
             f"    run(three(grid, launch_grid), ({values}))"]
    exec(_compiled("\n".join(lines) + "\n"), env)  # noqa: S102 - made from argument names and positions only
    return env["launch"]


_PADDING = {1: (1, 1), 2: (1,), 3: ()}


def _three(grid, launch_grid) -> tuple:
    """The grid as three ints: a tuple of one to three non-negative ints at once, anything else as
    launch_grid has it (its checks and errors)."""
    if type(grid) is tuple and 0 < len(grid) <= 3:
        g = grid + _PADDING[len(grid)]
        if type(g[0]) is int and type(g[1]) is int and type(g[2]) is int and min(g) >= 0:
            return g
    return launch_grid(grid, {})


def runner(compiled):
    """`compiled`'s launch as one generated function (grid of three ints, runtime args) -> None: no
    programs, nothing run; each pointer's memory a 1-D view (compiler._flat, inlined where the tensor
    is one already); on a CPU, this thread's parallel launches sized as torch's first, and by the
    launch's elements."""
    from .compiler import _flat
    cpu = compiled.device_kind == "cpu"
    env = {"function": _on_torch_threads(compiled) if cpu else compiled._function, "flat": _flat,
           "sync_threads": threads.sync_threads, "T": torch.Tensor}
    lines = ["def run(grid, args):",
             "    g0, g1, g2 = grid",
             "    if g0 <= 0 or g1 <= 0 or g2 <= 0:",
             "        return"]
    names = "".join(f"a{i}, " for i in range(len(compiled.params)))
    if compiled.params:
        lines.append(f"    {names}= args")
    for i, kind in enumerate(compiled.params):
        if kind == "pointer":
            # stride() == (1,): one call for "1-D and contiguous" (a size-1 view of another stride
            # takes flat's path, which returns it as it is)
            lines += [f"    if type(a{i}) is not T or a{i}.requires_grad or a{i}.stride() != (1,):",
                      f"        a{i} = flat(a{i})"]
    if cpu:   # the team sized by the launch's elements where a program's are known (threads.sync_threads)
        lines.append("    sync_threads()" if compiled.work is None else f"    sync_threads(g0 * g1 * g2 * {compiled.work})")
    lines.append(f"    function({names}g0, g1, g2)")
    exec(_compiled("\n".join(lines) + "\n"), env)  # noqa: S102 - made from argument positions only
    return env["run"]


def _on_torch_threads(compiled):
    """The CPU kernel's function with its parallel loop on torch's OpenMP team (threads.py says why:
    TVM's own workers sleep between kernels, and waking them cost more than a small kernel's work).
    The code that runs is then a library's: its disk cache entry's, else one exported for it."""
    if "TVMBackendParallelLaunch" not in compiled.stages.get("source", ""):
        return compiled._function   # no parallel loop (a kernel with atomics): nothing to launch
    library = os.path.join(compiled.cache_path, "lib.so") if compiled.cache_path else None
    compiled.executable = threads.run_on_torch_threads(compiled.executable, "tir", library, compiled.from_disk)
    compiled._function = compiled.executable[compiled.name]
    return compiled._function


def remember(cache: dict, key, launcher) -> None:
    """`launcher` kept for `key` (the oldest dropped past MAX_LAUNCHERS)."""
    if key is None:
        return
    if len(cache) >= MAX_LAUNCHERS:
        cache.pop(next(iter(cache)))
    cache[key] = launcher

