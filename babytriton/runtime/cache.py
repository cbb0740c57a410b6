"""The persistent cache: compiled versions kept on disk, keyed by everything that changes the code.

A key is a list of labelled parts (the function's source, what its global names resolve to, each
argument's dtype and shape, the target, the options, the versions of babytriton and TVM). Its
digest is a SHA-256 of a canonical text of the parts, the same in every process. An entry is a
folder `<cache dir>/<function>/<digest>/` holding the exported library (`lib.so`), the key
(`key.json`, small, read by explain), and everything else a Kernel needs without compiling
(`meta.json`: stage texts, fusion record; `module.json`: the lowered IRModule, read on demand).

Entries are written into a temporary folder and renamed into place (atomic on one file system),
so concurrent writers never see half an entry; processes wanting the same missing entry take turns
on its lock file (`entry_lock`), so that one compiles it and the others load it; a reader checks
the library's checksum and the metadata, and treats anything unreadable as corrupt: it warns,
recompiles and replaces it.
"""
from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import time
import types
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tvm
import tvm_ffi
from tvm import relax

from ..core import targets
from . import threads
from ..frontend.arguments import ArgSpec
from ..core.config import __version__, cache_dir, disk_enabled  # noqa: F401 - cache.cache_dir, cache.disk_enabled are public
from ..core.errors import CompilationError
from ..frontend.function import Decorated, FunctionInfo, plain_function
from ..frontend.source import environment
from ..core.types import Param, format_shape

FORMAT = 1  # the layout of an entry; bump it when what is stored changes
# Options that only change how a result is reported or stored, not the generated code.
NOT_IN_KEY = ("verbose", "cache", "target")
FUSION_KEYS = {"params", "ops", "outputs", "kernels", "kernel_outputs"}
# Temporary folders older than this were left by a process that died while writing.
STALE_SECONDS = 3600
ENTRY_NAME = re.compile(r"[0-9a-f]{32}")    # an entry's folder: its key's digest
LEFTOVER = (".tmp-", ".trash-")             # a writer's folders beside the entries (store)
LOCK = ".lock-"   # beside an entry, its lock file (entry_lock): never removed, a waiter may hold it open


class CacheWarning(UserWarning):
    """Something went wrong with the disk cache; the compiler carried on without it."""


# --------------------------------------------------------------------------------------------------
# where and whether
# --------------------------------------------------------------------------------------------------

def loadable_here(target: tvm.target.Target) -> bool:
    """A library with CUDA kernels loads only where TVM's CUDA runtime is present."""
    if target.kind.name != "cuda":
        return True
    return tvm.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is not None


# --------------------------------------------------------------------------------------------------
# the key
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyPart:
    """One thing the generated code depends on: `text` goes into the digest, `shown` to people."""
    label: str
    text: str
    shown: str


@dataclass(frozen=True)
class CacheKey:
    parts: tuple[KeyPart, ...]
    unstable: str | None = None   # why this version cannot be keyed on disk (None: it can)

    @functools.cached_property
    def digest(self) -> str:
        canonical = json.dumps([FORMAT] + [[p.label, p.text] for p in self.parts], ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def summary(self) -> dict[str, tuple[str, str]]:
        """label -> (fingerprint of the text, shown text): what explain compares and prints."""
        return {p.label: (_sha(p.text)[:16], p.shown) for p in self.parts}


def differences(old: dict[str, tuple[str, str]], new: dict[str, tuple[str, str]]) -> list[str]:
    """`label: old → new` for every part that differs between two key summaries."""
    out = []
    for label in list(old) + [label for label in new if label not in old]:
        before, after = old.get(label), new.get(label)
        if before is not None and after is not None and before[0] == after[0]:
            continue
        shown_old = before[1] if before else "—"
        shown_new = after[1] if after else "—"
        if shown_old == shown_new:  # same short form, different text (e.g. an edited source)
            out.append(f"{label}: changed")
        else:
            out.append(f"{label}: {shown_old} → {shown_new}")
    return out


def nearest(candidates: list[dict], new: dict) -> tuple[dict | None, list[str]]:
    """The existing key summary that differs from `new` in the fewest parts, and those parts."""
    best, best_diff = None, None
    for summary in candidates:
        diff = differences(summary, new)
        if best_diff is None or len(diff) < len(best_diff):
            best, best_diff = summary, diff
    return best, best_diff or []


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[KeyPart, ...]:
    """babytriton (its version and a digest of its own sources: an edited compiler is another
    compiler), TVM, tvm-ffi and Python."""
    package = Path(__file__).parent.parent  # babytriton/, all of it
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    sources = digest.hexdigest()[:12]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (KeyPart("babytriton", f"{__version__} {sources}", f"{__version__} (sources {sources[:8]})"),
            KeyPart("tvm", tvm.__version__, tvm.__version__),
            KeyPart("tvm-ffi", tvm_ffi.__version__, tvm_ffi.__version__),
            KeyPart("python", python, python))


def _info(function) -> FunctionInfo:
    """The FunctionInfo of a @jit function, or the FunctionInfo itself."""
    return function.info if isinstance(function, Decorated) else function


def make_key(function, specs: tuple[ArgSpec, ...], target: tvm.target.Target) -> CacheKey:
    """Everything that changes the code compiled for `function` (a FunctionInfo or a @jit function)
    called with arguments like `specs`."""
    info = _info(function)
    parts = [_source_part(info)]
    unstable = None
    for path, value in global_uses(info):
        text, shown = canonical(value, set())
        if text is None:
            unstable = unstable or (f"the global `{path}` ({type(value).__name__}) has no stable text "
                                    "form to key a disk entry on")
            text = shown = f"<{type(value).__name__}>"
        parts.append(KeyPart(f"global `{path}`", text, shown))
    for param, spec in zip(info.params, specs):
        parts.extend(_arg_parts(param, spec))
    parts.append(KeyPart("target", str(target), _short_target(target)))
    # the host CPU and torch's BLAS decide which products go to torch (targets.offloaded_matmuls)
    offload = repr(targets.offloaded_matmuls(target, info.options.get("schedule", "dlight")))
    parts.append(KeyPart("matrix products to torch", offload, offload))
    for name, value in sorted(info.options.items()):
        if name not in NOT_IN_KEY:
            parts.append(KeyPart(f"option `{name}`", repr(value), repr(value)))
    parts.extend(_versions())
    return CacheKey(tuple(parts), unstable)


def _source_part(info: FunctionInfo) -> KeyPart:
    source = info.parsed.source
    lines = source.count("\n") + (not source.endswith("\n"))
    return KeyPart(f"source of `{info.name}`", source, f"{lines} lines, sha256 {_sha(source)[:8]}")


def _arg_parts(param: Param, spec: ArgSpec) -> list[KeyPart]:
    name = f"`{param.name}`"
    if spec.kind == "constexpr":
        text = f"{type(spec.value).__name__} {spec.value!r}"
        return [KeyPart(f"value of {name}", text, f"{spec.value!r} ({type(spec.value).__name__})")]
    shape = format_shape(spec.shape) if spec.kind == "tensor" else "run-time scalar"
    parts = [KeyPart(f"dtype of {name}", spec.dtype, spec.dtype), KeyPart(f"shape of {name}", shape, shape)]
    if spec.device:  # functions with device blocks compile per argument placement
        parts.append(KeyPart(f"device of {name}", spec.device, spec.device))
    if spec.layout is not None:  # the code reads a permuted or broadcast tensor's memory in its order
        parts.append(KeyPart(f"layout of {name}", repr(spec.layout), str(spec.layout)))
    return parts


def _short_target(target: tvm.target.Target) -> str:
    config = target.export()
    extra = [f"{k}={config[k]}" for k in ("arch", "mcpu") if config.get(k)]
    return " ".join([target.kind.name] + extra)


# --------------------------------------------------------------------------------------------------
# what the function's global names resolve to
# --------------------------------------------------------------------------------------------------

def global_uses(info: FunctionInfo) -> list[tuple[str, object]]:
    """(dotted path, value) for each global or closure name the function reads, followed through
    attribute accesses (`math.pi`, `cfg.scale`): the code generator folds these values in."""
    names = environment(info.parsed.fn)
    builtins_ = names.get("__builtins__", {})
    builtins_ = vars(builtins_) if isinstance(builtins_, types.ModuleType) else builtins_
    found: dict[str, object] = {}
    for path in _free_paths(info.parsed.tree):
        root, *attrs = path.split(".")
        if root in names:
            value = names[root]
        elif root in builtins_:
            value = builtins_[root]
        else:
            continue  # undefined: the code generator reports it
        resolved = [root]
        for attr in attrs:
            try:
                value = getattr(value, attr)
            except Exception:  # noqa: BLE001 - any failing attribute: stop where it resolves
                break
            resolved.append(attr)
        found.setdefault(".".join(resolved), value)
    return sorted(found.items())


def global_state(info: FunctionInfo) -> tuple:
    """(check, values) from one reading of the global and closure names the function reads, and of
    attribute paths from them (`cfg.scale`), @jit functions it calls included. `values` is hashable,
    the values' text forms (as in the disk key): the part of the in-memory key that makes a changed
    global find or compile the version for its new value. `check()` says whether any of those names
    now resolves to another object than it did: the cached call path runs it on every call (identity
    tests only). check is None when the function reads no name."""
    checks, values = [], []
    _read_globals(info, checks, values, set())
    if not checks:
        return None, ()
    check = checks[0] if len(checks) == 1 else (lambda: any(changed() for changed in checks))
    return check, tuple(values)


_MISSING = object()


def _read_globals(info: FunctionInfo, checks: list, values: list, visited: set) -> None:
    visited.add(id(info))
    paths = sorted(_free_paths(info.parsed.tree))
    if not paths:
        return
    fn = info.parsed.fn
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    builtins_ = fn.__globals__.get("__builtins__", {})
    builtins_ = vars(builtins_) if isinstance(builtins_, types.ModuleType) else builtins_
    # Generated: one expression per path, so that the check is one chain of `is not` tests in one
    # Python function (a few tens of ns per name), not a loop of calls.
    env = {"g": fn.__globals__, "M": _MISSING}
    exprs = []
    for i, path in enumerate(paths):
        root, *attrs = path.split(".")
        if root in cells:
            env[f"c{i}"] = cells[root]
            expr = f"c{i}.cell_contents"
        else:  # a global, else the builtin it falls back to (a global defined later shadows it)
            env[f"b{i}"] = builtins_.get(root, _MISSING)
            expr = f"g.get({root!r}, b{i})"
        for attr in attrs:
            expr = f"getattr({expr}, {attr!r}, M)"
        exprs.append(expr)
    seen = ", ".join(f"s{i}" for i in range(len(exprs)))
    source = (f"def make({', '.join(env)}):\n"
              f"    def read():\n        return ({''.join(e + ', ' for e in exprs)})\n"
              f"    def check({seen}):\n"
              f"        def changed():\n"
              f"            return {' or '.join(f'{e} is not s{i}' for i, e in enumerate(exprs))}\n"
              f"        return changed\n"
              f"    return read, check\n")
    namespace: dict = {}
    exec(compile(source, "<babytriton global check>", "exec"), namespace)  # noqa: S102 - our own text
    read, check = namespace["make"](**env)
    now = read()
    checks.append(check(*now))
    callees = []
    for path, value in zip(paths, now):
        if value is _MISSING:   # undefined (the compiler says so), or an attribute it doesn't have
            text = "missing"
        elif isinstance(value, Decorated) or plain_function(value) is not None:  # inlined: what it reads follows
            text = Identity(value)
            callees.append(value.info if isinstance(value, Decorated) else plain_function(value))
        else:
            text = canonical(value, set())[0]
        values.append((path, text if text is not None else Identity(value)))
    for callee in callees:
        if id(callee) not in visited:
            _read_globals(callee, checks, values, visited)


class Identity:
    """A value without a stable text form, in an in-memory key: equal only to itself (and kept alive
    by the key, so that its id is not reused while the key exists)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Identity) and other.value is self.value

    def __hash__(self):
        return id(self.value)


@functools.lru_cache(maxsize=4096)
def _free_paths(tree: ast.FunctionDef) -> frozenset[str]:
    """Dotted paths (`np.float32`, `SCALE`) in the body, rooted at names the function doesn't bind.

    Decorators, annotations and defaults are evaluated by Python, not compiled: their effect
    reaches the key through the options and the argument specs instead."""
    body = [node for stmt in tree.body for node in ast.walk(stmt)]
    local = {a.arg for a in ast.walk(tree.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in body if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    inner = {id(n.value) for n in body if isinstance(n, ast.Attribute)}
    paths = set()
    for node in body:
        if not isinstance(node, (ast.Name, ast.Attribute)) or id(node) in inner:
            continue
        path, base = [], node
        while isinstance(base, ast.Attribute):
            path.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id not in local:
            paths.add(".".join([base.id] + path[::-1]))
    return frozenset(paths)


def canonical(value, seen: set) -> tuple[str | None, str]:
    """(text to hash, short form to show) for a value the compiled code may depend on; the text is
    None when the value has no form that is the same in every process."""
    if isinstance(value, Decorated):
        return _canon_jit(value.info, seen)
    plain = plain_function(value)
    if plain is not None:  # a helper @jit code inlines: its source and what it reads, as a @jit function's
        try:
            return _canon_jit(plain, seen)
        except CompilationError:
            return None, f"<function {plain.name}>"
    for kinds, describe in _CANONICAL:
        if isinstance(value, kinds):
            return describe(value, seen)
    text = repr(value)
    if " at 0x" in text or "object at" in text:
        return None, f"<{type(value).__name__}>"
    return f"{type(value).__qualname__} {text}", _clip(text)


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _canon_scalar(value, seen):
    return f"{type(value).__name__} {value!r}", _clip(repr(value))


def _canon_sequence(value, seen):
    items = [canonical(v, seen) for v in value]
    if any(text is None for text, _ in items):
        return None, f"<{type(value).__name__}>"
    return (f"{type(value).__name__}[{', '.join(t for t, _ in items)}]",
            _clip(repr(value)))


def _canon_array(value, seen):
    array = value.detach().cpu().contiguous().numpy() if isinstance(value, torch.Tensor) else np.ascontiguousarray(value)
    digest = hashlib.sha256(array.tobytes()).hexdigest()
    return (f"{type(value).__name__} {array.dtype} {array.shape} {digest}",
            f"{type(value).__name__} {array.dtype} {format_shape(array.shape)} (sha256 {digest[:8]})")


def _canon_jit(value: FunctionInfo, seen):
    if id(value) in seen:
        return f"recursive @jit {value.parsed.fn.__qualname__}", f"@jit {value.name}"
    seen = seen | {id(value)}
    inner = [_source_part(value)]
    for path, dep in global_uses(value):
        text, shown = canonical(dep, seen)
        if text is None:
            return None, f"@jit {value.name}"
        inner.append(KeyPart(path, text, shown))
    options = {k: v for k, v in value.options.items() if k not in ("verbose", "cache")}
    text = json.dumps([[p.label, p.text] for p in inner] + [repr(sorted(options.items()))])
    return f"@jit {text}", f"@jit {value.name} (sha256 {_sha(text)[:8]})"


def _canon_tvm(value, seen):
    text = value.script()
    return f"{type(value).__name__} {text}", f"{type(value).__name__} (sha256 {_sha(text)[:8]})"


def _canon_named(value, seen):
    name = f"{getattr(value, '__module__', None) or ''}.{getattr(value, '__qualname__', None) or value.__name__}"
    return f"{type(value).__name__} {name}", name.lstrip(".")


def _canon_module(value, seen):
    return f"module {value.__name__}", f"module {value.__name__}"


_CANONICAL = [
    ((type(None), bool, int, float, complex, str, bytes, np.generic, torch.dtype, np.dtype), _canon_scalar),
    ((tuple, list), _canon_sequence),
    ((torch.Tensor, np.ndarray), _canon_array),
    ((tvm.tirx.PrimFunc, tvm.IRModule, relax.Function), _canon_tvm),
    ((types.ModuleType,), _canon_module),
    ((types.FunctionType, types.BuiltinFunctionType, type), _canon_named),
]


# --------------------------------------------------------------------------------------------------
# entries on disk
# --------------------------------------------------------------------------------------------------

@dataclass
class Entry:
    """What a disk hit gives back: enough to build a Kernel without compiling."""
    path: Path
    executable: relax.VMExecutable
    stages: dict[str, str]
    fusion: dict | None
    size_checks: tuple = ()   # Kernel.size_checks
    backend: str = "relax"    # "tir": a library holding the PrimFunc itself, no Relax VM executable
    outputs: tuple = ()       # backend="tir": the parameters the function writes (Kernel.outputs)
    work: int | None = None   # backend="tir": a Triton program's block elements (CompiledKernel.work)


def function_dir(function) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", _info(function).parsed.fn.__qualname__)[:100]
    return cache_dir() / name


def entry_dir(function, key: CacheKey) -> Path:
    return function_dir(function) / key.digest


def entries(root: Path) -> list[Path]:
    """The compiled versions under a cache folder: `<root>/<function>/<key digest>/` (entry_dir)."""
    return sorted(p for p in root.glob("*/*") if ENTRY_NAME.fullmatch(p.name) and p.is_dir())


def leftovers(folder: Path) -> list[Path]:
    """What writers left in a function's folder: a `store` that died mid-way, a replaced entry."""
    return [p for p in folder.glob(".t*-*") if p.name.startswith(LEFTOVER)]


def locks(folder: Path) -> list[Path]:
    """The entries' lock files in a function's folder (entry_lock), for `cache clear` to remove."""
    return list(folder.glob(f"{LOCK}*"))


@contextlib.contextmanager
def entry_lock(path: Path):
    """Held by the one process that looks up, and where missing compiles and stores, the entry at
    `path`: another process wanting the same entry waits (flock) and then finds it on disk. The
    kernel drops the lock of a process that dies; a folder that can't hold the file goes unlocked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f"{LOCK}{path.name}", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # an unwritable cache folder: nothing to race for (store says what is wrong)
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)   # releases the lock


class Corrupt(Exception):
    """An entry that exists but cannot be used as it is."""


def load(path: Path, key: CacheKey) -> Entry | None:
    """The entry at `path`, None when there is none; Corrupt when there is one that can't be used."""
    try:
        raw = (path / "meta.json").read_bytes()
        library = (path / "lib.so").read_bytes()
    except FileNotFoundError:
        if path.exists():  # entries appear whole (renamed into place): this one was damaged
            raise Corrupt("a file of it is missing") from None
        return None
    except OSError:  # an unreadable cache folder: a miss (writing it will say what is wrong)
        return None
    try:
        meta = json.loads(raw)
        if meta.get("format") != FORMAT or meta.get("digest") != key.digest:
            raise Corrupt("its metadata belongs to another key")
        stages = meta["stages"]
        if not isinstance(stages, dict) or not all(isinstance(v, str) for v in stages.values()):
            raise Corrupt("its stage texts are malformed")
        if hashlib.sha256(library).hexdigest() != meta["lib_sha256"]:
            raise Corrupt("its library does not match its checksum")
        fusion = meta["fusion"]
        if fusion is not None and not (isinstance(fusion, dict) and FUSION_KEYS <= fusion.keys()):
            raise Corrupt("its fusion record is malformed")
        backend = meta.get("backend", "relax")
        outputs = meta.get("outputs", [])
        work = meta.get("work")
        if backend not in ("relax", "tir") or not all(isinstance(o, str) for o in outputs) or \
                not (work is None or type(work) is int):
            raise Corrupt("its backend, outputs or work are malformed")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Corrupt(f"its metadata is unreadable ({type(e).__name__})") from None
    try:
        executable = threads.load_executable(str(path / "lib.so"), backend)
    except Exception as e:  # noqa: BLE001 - TVM's loader raises several kinds for a bad library
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Corrupt(f"its library does not load: {_clip(first, 120)}") from None
    checks = tuple(tuple(c) for c in meta.get("size_checks", ()))
    return Entry(path, executable, stages, fusion, checks, backend, tuple(outputs), work)


def store(path: Path, key: CacheKey, executable, stages: dict[str, str], fusion: dict | None,
          module: tvm.IRModule | None, replace: bool = False, size_checks: tuple = (),
          backend: str = "relax", outputs: tuple = (), work: int | None = None) -> bool:
    """Write an entry atomically; False when another process already wrote it (then theirs stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path.parent)
    tmp = path.parent / f"{LEFTOVER[0]}{key.digest[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        library = tmp / "lib.so"
        executable.export_library(str(library))
        meta = {"format": FORMAT, "digest": key.digest, "stages": stages, "fusion": fusion,
                "size_checks": list(size_checks), "backend": backend, "outputs": list(outputs), "work": work,
                "lib_sha256": hashlib.sha256(library.read_bytes()).hexdigest()}
        (tmp / "meta.json").write_text(json.dumps(meta))
        (tmp / "key.json").write_text(json.dumps({"digest": key.digest, "summary": key.summary()}))
        if module is not None:
            try:
                (tmp / "module.json").write_text(tvm.ir.save_json(module))
            except Exception:  # noqa: BLE001 - an IR TVM cannot serialise: the entry is still usable
                pass
        if replace and path.exists():
            trash = path.parent / f"{LEFTOVER[1]}{tmp.name}"
            try:
                os.rename(path, trash)
            except OSError:
                pass  # someone else moved it first
            else:
                shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, path)
        except OSError:  # the folder exists: another process finished first
            return False
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(folder: Path) -> None:
    now = time.time()
    for leftover in leftovers(folder):
        if now - _mtime(leftover) > STALE_SECONDS:
            shutil.rmtree(leftover, ignore_errors=True)


def load_module_json(path: Path) -> tvm.IRModule | None:
    try:
        return tvm.ir.load_json((path / "module.json").read_text())
    except Exception:  # noqa: BLE001 - missing or unreadable: the caller recompiles for it
        return None


def existing_summaries(function, limit: int = 64) -> list[tuple[Path, dict]]:
    """The key summaries of this function's entries on disk, newest first."""
    folder = function_dir(function)
    try:
        entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    except OSError:
        return []
    entries.sort(key=lambda p: _mtime(p), reverse=True)
    out = []
    for path in entries[:limit]:
        try:
            summary = json.loads((path / "key.json").read_text())["summary"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append((path, {label: tuple(v) for label, v in summary.items()}))
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def warn(message: str, category: type[Warning] = CacheWarning) -> None:
    """Warn, pointing at the first caller outside babytriton (the user's call or compile)."""
    package = str(Path(__file__).parent.parent)  # babytriton/
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
