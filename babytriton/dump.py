"""Stage dumps: `BABYTRITON_DUMP_DIR=path` writes every compiled version's stages as numbered files
(`00_python.py`, `01_ast.txt`, `02_relax.py`, ..., `NN_source.ll` or `.cu`) in a folder per function
and key; `BABYTRITON_DUMP=1` prints them. Versions loaded from the disk cache are dumped too: their
stages are the same texts the compilation recorded.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .frontend.arguments import ArgSpec
from .core.types import Param

# TVMScript stages are Python; the rest by what they hold.
SUFFIX = {"python": ".py", "ast": ".txt"}
SOURCE_SUFFIX = {"cuda": ".cu", "llvm": ".ll"}


def printing() -> bool:
    return os.environ.get("BABYTRITON_DUMP", "").strip().lower() not in ("", "0", "false", "no", "off")


def directory() -> Path | None:
    folder = os.environ.get("BABYTRITON_DUMP_DIR", "").strip()
    return Path(folder).expanduser() if folder else None


def print_stage(function: str, stage: str, text: str) -> None:
    print(f"===== {function}: {stage} =====\n{text}", flush=True)


def file_names(stages: dict[str, str], target_kind: str) -> list[tuple[str, str]]:
    """(file name, stage) in stage order: the number says where in the pipeline a text comes from."""
    out = []
    for index, stage in enumerate(stages):
        suffix = SOURCE_SUFFIX.get(target_kind, ".txt") if stage == "source" else SUFFIX.get(stage, ".py")
        out.append((f"{index:02d}_{stage}{suffix}", stage))
    return out


def version_folder(function: str, params: list[Param], specs: tuple[ArgSpec, ...], digest: str) -> str:
    """`<function>/<readable arguments>-<digest>`: which arguments, at a glance, and unique."""
    words = []
    for param, spec in zip(params, specs):
        if spec.kind == "constexpr":
            words.append(f"{param.name}={spec.value!r}")
        elif spec.kind == "scalar":
            words.append(f"{param.name}_{spec.dtype}")
        else:
            words.append(f"{param.name}_{spec.dtype}_{'x'.join(str(d) for d in spec.shape) or 'scalar'}"
                         + ("_strided" if spec.layout is not None else ""))
    readable = re.sub(r"[^A-Za-z0-9_.=-]+", "_", "__".join(words))[:60] or "noargs"
    return f"{_safe(function)}/{readable}-{digest[:8]}"


def write(root: Path, folder: str, stages: dict[str, str], target_kind: str,
          extra: dict[str, str]) -> Path:
    """Write the stage files (and `extra` files such as the key and the fusion map) under root."""
    out = root / folder
    out.mkdir(parents=True, exist_ok=True)
    for name, stage in file_names(stages, target_kind):
        (out / name).write_text(stages[stage])
    for name, text in extra.items():
        (out / name).write_text(text)
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:100]
