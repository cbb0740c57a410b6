"""The launch fast path of `kernel[grid](...)`: once a launch has been bound, checked and compiled, later
launches whose arguments have the same signature (tensor dtypes and devices, int ranges, constexpr and
option values, the same positional/keyword shape) skip binding, typing and keying, and go straight to
the compiled kernel with the argument order worked out once (back-to-back launches of a small kernel
are bound by this host time)."""
from __future__ import annotations

import torch

from .language import core as tl

_INT32 = range(-2 ** 31, 2 ** 31)
MAX_LAUNCHERS = 256   # per kernel: a loop over many sizes re-keys, it must not grow without bound


def launch_key(args: tuple, kwargs: dict, exact: tuple, by_value: frozenset):
    """What a launch's specialisation depends on, cheap to compute (map, not a generator: this is
    most of a fast launch's time): None when it cannot be keyed (more positional arguments than
    parameters: the slow path reports it). `exact`: per parameter, whether it keys by value."""
    if len(args) > len(exact):
        return None
    key = (tuple(map(_part, args, exact)), tuple(kwargs), tuple(map(_part, kwargs.values(),
                                                                     map(by_value.__contains__, kwargs))))
    try:
        hash(key)
        return key
    except TypeError:   # an unhashable constexpr: the slow path keys it by repr
        return None


def _part(value, exact: bool):
    """One argument's share of the key: a tensor by dtype and device, a constexpr or option by value,
    an int by its kernel type and whether it is 1 (specialised), other numbers by type."""
    if isinstance(value, torch.Tensor):
        return value.dtype, value.get_device()
    if exact:
        value = tl.unwrap(value)
        return type(value), value
    if isinstance(value, int) and type(value) is not bool:
        return type(value), value == 1, value in _INT32 or value >= 2 ** 63
    return type(value)


def make_launcher(compiled, names: list, args: tuple, kwargs: dict, runtime: dict, constants: dict, launch_grid):
    """A function (args, kwargs, grid) -> None launching `compiled` for launches keyed like this one:
    each runtime argument taken from its position, keyword or (fixed) default."""
    position = {name: i for i, name in enumerate(names[:len(args)])}
    picks = tuple((position[n], None, None) if n in position else (None, n, None) if n in kwargs
                  else (None, None, v) for n, v in runtime.items())
    order = tuple(runtime)
    run = compiled.launcher()

    def launch(args, kwargs, grid):
        values = [args[i] if i is not None else kwargs[k] if k is not None else d for i, k, d in picks]
        meta = {**constants, **dict(zip(order, values))} if callable(grid) else None
        run(launch_grid(grid, meta), values)
    return launch


def remember(cache: dict, key, launcher) -> None:
    """`launcher` kept for `key` (the oldest dropped past MAX_LAUNCHERS)."""
    if key is None:
        return
    if len(cache) >= MAX_LAUNCHERS:
        cache.pop(next(iter(cache)))
    cache[key] = launcher
