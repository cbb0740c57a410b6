"""The compiled versions of one @jit function: found in memory, loaded from the disk cache or built,
then stored and dumped. `JITFunction` (jit.py) keys them; this holds and makes them."""
from __future__ import annotations

import ast
import threading

from . import dump, schedules
from . import explain as explaining
from .backends import relax as relax_backend, tir as tir_backend
from .frontend.arguments import ArgSpec
from .frontend.function import FunctionInfo
from .runtime import cache
from .runtime.kernel import Compiled, Kernel

__all__ = ["Versions", "warn_serial"]


def warn_serial(kernel: Kernel) -> None:
    """A SerialKernelWarning for each kernel left with a large amount of work on one thread (one GPU
    block), naming the user's lines that it computes."""
    for name, work in schedules.serial_kernels(kernel.module, kernel.target):
        try:
            ops = kernel.fusion[name].ops
        except KeyError:
            ops = ()
        lines = [f"{kernel.fusion.filename}:{op.line}: {op.source}" for op in ops if op.line is not None]
        where = "; ".join(dict.fromkeys(lines)) or "(line unknown)"
        one = "one GPU block" if kernel.device_kind == "cuda" else "one thread"
        cache.warn(f"babytriton: kernel '{name}' of '{kernel.name}' runs about {work:,} loop iterations on {one} "
                   f"(no schedule rule spread it over more): {where}", schedules.SerialKernelWarning)


class Versions:
    """One function's compiled versions: forwards by (specs, globals key), backwards and training
    forwards by ((specs, globals key), autograd.Variant); each compiled once however many threads ask."""

    def __init__(self, info: FunctionInfo, lock: threading.RLock):
        self.info = info
        self.forwards: dict[tuple, Kernel] = {}    # (specs, globals key) -> the compiled version
        self.backwards: dict[tuple, Kernel] = {}   # ((specs, globals key), autograd.Variant) -> its backward
        self.nothing_saved: set = set()            # training forwards asked for that save nothing
        self.lock = lock   # held while compiling (the function's: specialising takes it too)
        self.update_lock = threading.Lock()        # counts only, never held while compiling
        self.stats = {"compilations": 0, "hits": 0, "misses": 0, "disk_hits": 0, "disk_writes": 0}
        self.disk_warned = False

    def forward(self, key: tuple) -> Kernel:
        """The version for the memory key (specs, globals key), compiled once."""
        kernel = self.forwards.get(key)   # without the lock: a hit never waits for another's compile
        if kernel is None:
            with self.lock:  # threads asking for the same version compile it once
                kernel = self.forwards.get(key)
                if kernel is None:
                    self.stats["misses"] += 1
                    kernel = self.obtain(key[0], key[1])
                    self.forwards[key] = kernel
                    return kernel
        with self.update_lock:
            self.stats["hits"] += 1
        return kernel

    def derived(self, key: tuple, variant, params) -> Kernel:
        """A backward or training forward (`variant.part`) for the memory key of its specs, compiled
        once (threads asking for the same one wait for it); a training forward found to save nothing
        is remembered as such (relax_backend.NothingSaved, raised again without compiling)."""
        key = (key, variant)
        kernel = self.backwards.get(key)
        if kernel is None:
            with self.lock:
                kernel = self.backwards.get(key)
                if kernel is None:
                    if key in self.nothing_saved:
                        raise relax_backend.NothingSaved(self.info.name)
                    try:
                        kernel = self.backwards[key] = self.obtain(key[0][0], key[0][1], variant, params)
                    except relax_backend.NothingSaved:
                        self.nothing_saved.add(key)
                        raise
        return kernel

    def cache_key(self, specs: tuple[ArgSpec, ...], variant=None) -> cache.CacheKey:
        """The disk cache key of a version; with a `variant`, of that backward or training forward."""
        key = cache.make_key(self.info, specs, self.info.target)
        if variant is not None:
            key = cache.CacheKey(key.parts + (variant.key_part(self.info.params),), key.unstable)
        return key

    def obtain(self, specs: tuple[ArgSpec, ...], globals_key: tuple, variant=None, params=None) -> Kernel:
        """A version not in memory: from the disk cache when it holds one, else compiled (and stored).
        With a `variant`, the backward of the version (its `params` the forward's and the gradients')."""
        name, options = self.info.name, self.info.options
        key = self.cache_key(specs, variant)
        versions = self.forwards if variant is None else self.backwards   # the nearest of its own kind
        others = [k.cache_key.summary() for k in versions.values() if k.cache_key is not None]
        why = cache.nearest(others, key.summary())[1] if others else []
        if why and options["verbose"]:
            print(f"===== {name}: new version; differs from the nearest in: {'; '.join(why)}", flush=True)
        use_disk = cache.disk_enabled(options["cache"]) and key.unstable is None
        path = cache.entry_dir(self.info, key) if use_disk else None
        if use_disk:   # another process compiling this entry: wait for it, then load what it stored
            with cache.entry_lock(path):
                compiled, loader, from_disk = self.load_or_build(path, key, specs, variant)
        else:
            compiled, loader, from_disk = self.load_or_build(None, key, specs, variant)
        cache_path = str(path) if path is not None and (path / "meta.json").exists() else None
        kernel = Kernel(self.kernel_name(compiled, variant), params or self.info.params, specs, self.info.target,
                        compiled, source_map=self.info.parsed.source_map, module_loader=loader, cache_key=key,
                        cache_path=cache_path, from_disk=from_disk, why=why, globals_key=globals_key)
        if not from_disk and compiled.backend == "relax":
            warn_serial(kernel)
        self.dump(kernel, key)
        return kernel

    def load_or_build(self, path, key, specs, variant) -> tuple:
        """(the Compiled, its module loader or None, whether it came from disk): the entry at `path`
        where it is usable, else built (and stored there; `path` None: no disk cache)."""
        compiled, loader, replace = None, None, False
        if path is not None and cache.loadable_here(self.info.target):
            compiled, loader, replace = self.load(path, key, specs, variant)
        if compiled is not None:
            return compiled, loader, True
        compiled = self.build(specs, variant)
        self.stats["compilations"] += 1
        if path is not None and (replace or not (path / "meta.json").exists()):
            self.store(path, key, compiled, replace)
        return compiled, None, False

    def kernel_name(self, compiled: Compiled, variant) -> str:
        """The name a version's Kernel goes by."""
        name = self.info.name
        if variant is not None:
            return f"{name}_forward_saving" if variant.part == "forward" else f"{name}_backward"
        # backend="tir" calls the PrimFunc by the name of its `def`
        return self.info.parsed.name if compiled.backend == "tir" else name

    def load(self, path, key, specs, variant) -> tuple:
        """The disk cache entry at `path`: (the Compiled or None, its module loader, whether a corrupt
        entry is to be replaced)."""
        try:
            entry = cache.load(path, key)
        except cache.Corrupt as e:
            cache.warn(f"babytriton: the disk cache entry of '{self.info.name}' at {path} is corrupt ({e}); "
                       "recompiling and replacing it")
            return None, None, True
        if entry is None:
            return None, None, False
        compiled = Compiled(entry.backend, entry.executable, None, entry.stages, entry.fusion,
                            entry.size_checks, entry.outputs)
        self.stats["disk_hits"] += 1
        if self.info.options["verbose"] or dump.printing():
            for stage, text in entry.stages.items():
                dump.print_stage(self.info.name, stage, text)
        return compiled, self.module_loader(path, specs, variant), False

    def module_loader(self, path, specs, variant=None):
        def load():
            return cache.load_module_json(path) or self.build(specs, variant).module
        return load

    def store(self, path, key, compiled: Compiled, replace: bool) -> None:
        try:
            if cache.store(path, key, compiled.executable, compiled.stages, compiled.fusion, compiled.module,
                           replace, compiled.size_checks, compiled.backend, compiled.outputs):
                self.stats["disk_writes"] += 1
        except Exception as e:  # noqa: BLE001 - a full disk, no C compiler...: carry on without the entry
            if not self.disk_warned:
                self.disk_warned = True
                cache.warn(f"babytriton: could not write the disk cache entry of '{self.info.name}' under "
                           f"{path.parent} ({type(e).__name__}: {e}); continuing without it")

    def dump(self, kernel: Kernel, key) -> None:
        root = dump.directory()
        if root is None:
            return
        extra = {"key.txt": explaining.key_text(key, kernel.why), "fusion.txt": str(kernel.fusion) + "\n"}
        folder = dump.version_folder(self.info.name, self.info.params, kernel.specs, key.digest)
        try:
            dump.write(root, folder, kernel.stages, kernel.target.kind.name, extra)
        except OSError as e:
            cache.warn(f"babytriton: could not write the stage dump under {root} ({e})")

    def build(self, specs: tuple[ArgSpec, ...], variant=None) -> Compiled:
        """Compile one version with the function's backend; both give a `Compiled`. With a
        `variant` (autograd.Variant), its backward instead (backend="relax" only)."""
        info = self.info
        stages: dict[str, str] = {}
        verbose = info.options["verbose"] or dump.printing()

        def record(stage: str, text: str):
            stages[stage] = text
            if verbose:
                dump.print_stage(info.name, stage, text)

        record("python", info.parsed.source)
        record("ast", ast.dump(info.parsed.tree, indent=2))
        if variant is not None:
            forward = specs[:len(info.params)]
            return relax_backend.build_backward(info, forward, variant.requires, variant.outputs, record, stages,
                                                variant.part)
        backend = tir_backend if info.options["backend"] == "tir" else relax_backend
        return backend.build(info, specs, record, stages)
