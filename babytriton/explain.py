"""`f.explain(*args)`: what the cache key is made of for these arguments, whether a compiled version
exists in memory or on disk, and, where a new version is (or was) compiled beside others, which
key parts differ from the nearest existing one ("dtype of `a`: float32 → float16").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .runtime import cache


@dataclass
class Explanation:
    function: str
    key: cache.CacheKey
    in_memory: bool
    disk: str                      # "hit", "miss", "off", "not loadable here", "not keyable"
    disk_path: str | None
    versions: int                  # compiled versions of the function in memory
    differences: list[str] = field(default_factory=list)
    compared_with: str | None = None   # "memory" or "disk": where the nearest version lives
    compiled_because: list[str] | None = None
    fallback: str | None = None    # a backward: why calls differentiate with torch autograd instead

    @property
    def parts(self) -> dict[str, str]:
        return {p.label: p.shown for p in self.key.parts}

    @property
    def on_disk(self) -> bool:
        return self.disk == "hit"

    @property
    def text(self) -> str:
        width = max(len(label) for label in self.parts)
        lines = [f"explain {self.function}: cache key {self.key.digest}"]
        lines += [f"  {label:<{width}}  {shown}" for label, shown in self.parts.items()]
        lines.append(f"  in memory: {'yes' if self.in_memory else 'no'} "
                     f"({self.versions} compiled version{'s' if self.versions != 1 else ''} of {self.function})")
        disk = {"hit": f"yes ({self.disk_path})", "miss": "no", "off": "off (cache=False or BABYTRITON_CACHE=0)",
                "not loadable here": "entries with CUDA kernels cannot be loaded here (no CUDA runtime)",
                "not keyable": f"not used: {self.key.unstable}"}[self.disk]
        lines.append(f"  on disk: {disk}")
        if self.compiled_because:
            lines.append("  this version was compiled beside others; it differs from the nearest in:")
            lines += [f"    {d}" for d in self.compiled_because]
        elif not self.in_memory and self.compared_with:
            source = "on disk" if self.compared_with == "disk" else "in memory"
            action = "load it from disk" if self.on_disk else "compile a new version"
            lines.append(f"  a call would {action}; the nearest version {source} differs in:")
            lines += [f"    {d}" for d in self.differences] or ["    (nothing: same key)"]
        elif not self.in_memory:
            lines.append(f"  a call would {'load it from disk' if self.on_disk else 'compile the first version'}")
        if self.fallback:
            lines.append(f"  not compiled: calls run torch autograd over the eager reference, because of {self.fallback}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.text)


def key_text(key: cache.CacheKey, why: list[str]) -> str:
    """The key of one version as a table, and why it was compiled beside others (for dumps)."""
    width = max(len(p.label) for p in key.parts)
    lines = [f"cache key {key.digest}"] + [f"  {p.label:<{width}}  {p.shown}" for p in key.parts]
    if why:
        lines.append("compiled beside other versions; it differs from the nearest in:")
        lines += [f"  {d}" for d in why]
    return "\n".join(lines) + "\n"


def explain(info, key: cache.CacheKey, kernel, versions: list, function: str | None = None,
            fallback: str | None = None) -> Explanation:
    """What `f.explain(...)` prints for the function `info` (its FunctionInfo): `kernel` is the version
    in memory for `key` (or None), `versions` all the versions in memory (of its kind: forwards, or
    backwards named `function`; `fallback` why a backward is not compiled)."""
    disk, path = "off", None
    if cache.disk_enabled(info.options["cache"]):
        if key.unstable:
            disk = "not keyable"
        elif not cache.loadable_here(info.target):
            disk = "not loadable here"
        else:
            entry = cache.entry_dir(info, key)
            disk, path = ("hit", str(entry)) if (entry / "meta.json").exists() else ("miss", None)
    result = Explanation(function or info.name, key, kernel is not None, disk, path, len(versions),
                         fallback=fallback)
    if kernel is not None:
        result.compiled_because = kernel.why or None
        return result
    summary = key.summary()
    in_memory = [k.cache_key.summary() for k in versions if k.cache_key is not None]
    if in_memory:
        _, result.differences = cache.nearest(in_memory, summary)
        result.compared_with = "memory"
    elif disk != "off":
        on_disk = [s for p, s in cache.existing_summaries(info) if p.name != key.digest]
        if on_disk:
            _, result.differences = cache.nearest(on_disk, summary)
            result.compared_with = "disk"
    return result
