"""Compiled Triton kernels in the disk cache, stored and loaded as @jit's versions are
(runtime/cache.py: the same folder and switches, key parts, entry lock and atomic store), so that a
second process launches a kernel without compiling it."""
from __future__ import annotations

from ..core import targets
from ..core.config import disk_enabled
from ..runtime import cache
from . import compiler
from .language import core as tl

NOT_IN_KEY = ("target", "equal_to_1")   # keyed as parts of their own


def obtain(jit_fn, signature: dict, constants: dict, options: dict):
    """The compiled kernel for this specialisation: from the disk cache where it holds one, else
    compiled (and stored there). Without a usable cache (BABYTRITON_CACHE=0, a kernel reading a
    value with no stable text, a target TVM doesn't name) it is simply compiled."""
    target = _target(options.get("target"))
    key = make_key(jit_fn, signature, constants, options, target) if target is not None else None
    if key is None or key.unstable is not None or not disk_enabled(True):
        return compiler.compile(jit_fn, signature, constants, options)
    path = cache.entry_dir(jit_fn, key)
    with cache.entry_lock(path):   # one process compiles a missing entry; the others wait and load it
        kernel, replace = _load(jit_fn, path, key, signature, target) if cache.loadable_here(target) \
            else (None, False)
        if kernel is None:
            kernel = compiler.compile(jit_fn, signature, constants, options)
            if replace or not (path / "meta.json").exists():
                _store(jit_fn, path, key, kernel, replace)
    kernel.cache_key = key
    kernel.cache_path = str(path) if (path / "meta.json").exists() else None
    return kernel


def _target(target):
    """The TVM target a launch compiles for, None for a name TVM doesn't know (a test's stand-in)."""
    try:
        return targets.resolve_target(target if target is not None else "cpu")
    except (KeyError, ValueError, TypeError):
        return None


def make_key(jit_fn, signature: dict, constants: dict, options: dict, target) -> cache.CacheKey:
    """Everything that changes a kernel's code: its source and its callees' (what it reads), the
    argument types, the constexpr values, the launch options, the target and the versions."""
    source = jit_fn.parsed.source
    parts = [cache.KeyPart(f"source of `{jit_fn.__name__}`", source, f"sha256 {cache._sha(source)[:8]}")]
    unstable = None
    for path, value in cache.global_uses(jit_fn):
        text, shown = _canonical(value, set())
        if text is None:
            unstable = unstable or f"the global `{path}` ({type(value).__name__}) has no stable text form"
            text = shown = f"<{type(value).__name__}>"
        parts.append(cache.KeyPart(f"global `{path}`", text, shown))
    for name, kind in signature.items():
        parts.append(cache.KeyPart(f"type of `{name}`", str(kind), str(kind)))
    ones = ", ".join(options.get("equal_to_1", ())) or "none"
    parts.append(cache.KeyPart("arguments equal to 1", ones, ones))
    for name, value in constants.items():
        text, shown = _canonical(value, set())
        parts.append(cache.KeyPart(f"value of `{name}`", text or repr(value), shown))
        unstable = unstable or (None if text is not None else f"the constexpr `{name}` has no stable text form")
    for name, value in sorted(options.items()):
        if name not in NOT_IN_KEY:
            parts.append(cache.KeyPart(f"option `{name}`", repr(value), repr(value)))
    parts.append(cache.KeyPart("target", str(target), cache._short_target(target)))
    parts.extend(cache._versions())
    return cache.CacheKey(tuple(parts), unstable)


def _canonical(value, seen: set) -> tuple[str | None, str]:
    """As cache.canonical, with a @triton.jit callee keyed on its source and what it reads in turn."""
    if isinstance(value, tl.dtype):
        return f"tl.dtype {value.name}", value.name
    if isinstance(value, tl.constexpr):
        return _canonical(tl.unwrap(value), seen)
    if not getattr(value, "__triton_jit__", False):
        return cache.canonical(value, seen)
    if id(value) in seen:
        return f"recursive @triton.jit {value.__name__}", f"@triton.jit {value.__name__}"
    seen = seen | {id(value)}
    inner = [value.parsed.source]
    for path, dep in cache.global_uses(value):
        text, _ = _canonical(dep, seen)
        if text is None:
            return None, f"@triton.jit {value.__name__}"
        inner.append(f"{path} {text}")
    text = "\n".join(inner)
    return f"@triton.jit {text}", f"@triton.jit {value.__name__} (sha256 {cache._sha(text)[:8]})"


def _load(jit_fn, path, key, signature: dict, target) -> tuple:
    """(the kernel stored at `path` or None, whether a corrupt entry there is to be replaced)."""
    try:
        entry = cache.load(path, key)
    except cache.Corrupt as e:
        cache.warn(f"babytriton: the disk cache entry of kernel '{jit_fn.__name__}' at {path} is corrupt ({e}); "
                   "recompiling and replacing it")
        return None, True
    if entry is None:
        return None, False
    params = ["pointer" if isinstance(kind, tl.pointer_type) else "scalar" for kind in signature.values()]
    kernel = compiler.CompiledKernel(jit_fn.parsed.tree.name, entry.executable, entry.stages, params,
                                     targets.device_kind(target))
    kernel.from_disk = True
    kernel.work = entry.work
    return kernel, False


def _store(jit_fn, path, key, kernel, replace: bool) -> None:
    """Write the entry (the kernel's library and stages); a failure warns once per kernel and the
    kernel runs from memory."""
    try:
        cache.store(path, key, kernel.executable, kernel.stages, None, None, replace, backend="tir", work=kernel.work)
    except Exception as e:  # noqa: BLE001 - a full disk, no C compiler...: carry on without the entry
        if not getattr(jit_fn, "disk_warned", False):
            jit_fn.disk_warned = True
            cache.warn(f"babytriton: could not write the disk cache entry of kernel '{jit_fn.__name__}' under "
                       f"{path.parent} ({type(e).__name__}: {e}); continuing without it")
