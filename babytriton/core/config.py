"""The environment switches, each read in one place: where the disk cache lives, whether it is on,
and whether @jit functions run eagerly (`BABYTRITON_DEBUG` is read by errors.debug_enabled)."""
from __future__ import annotations

import os
from pathlib import Path

__version__ = "0.1.0"
OFF_VALUES = ("0", "false", "no", "off")


def cache_dir() -> Path:
    """`BABYTRITON_CACHE_DIR`, else `$XDG_CACHE_HOME/babytriton`, else `~/.cache/babytriton`."""
    explicit = os.environ.get("BABYTRITON_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "babytriton"


def disk_enabled(option: bool) -> bool:
    """The `cache` option, unless `BABYTRITON_CACHE=0` turns the disk cache off for everyone."""
    return option and os.environ.get("BABYTRITON_CACHE", "1").strip().lower() not in OFF_VALUES


def interpret_requested() -> bool:
    """`BABYTRITON_INTERPRET=1`: every call of a @jit function decorated from now on runs eagerly.
    Read once at decoration, so that the compiled call path never looks at the environment."""
    return os.environ.get("BABYTRITON_INTERPRET", "").strip().lower() not in ("", *OFF_VALUES)


def save_for_backward(device_kind: str) -> bool:
    """`BABYTRITON_SAVE_FOR_BACKWARD=1`: the backward takes the small forward values (row statistics)
    that a training forward saved, instead of recomputing them. Off by default: the training
    forward's row kernel also writes those per-row values, and no schedule rule yet takes a row
    kernel with such side outputs (CPU: CPUSpatial instead of CPUReduction, 3-6x slower; GPU: Dlight's
    Fallback), which costs more than the backward saves (benchmarks/RESULTS.md)."""
    value = os.environ.get("BABYTRITON_SAVE_FOR_BACKWARD", "").strip().lower()
    return bool(value) and value not in OFF_VALUES


def strict_rules() -> bool:
    """`BABYTRITON_STRICT_RULES=1` (the test suite sets it): a schedule rule of babytriton's that fails
    with a Python programming error (AttributeError, NameError, TypeError) raises it, where a user's
    compile would see the rule decline the kernel and the next rule take it (schedules/wrappers.py)."""
    return os.environ.get("BABYTRITON_STRICT_RULES", "").strip().lower() not in ("", *OFF_VALUES)
