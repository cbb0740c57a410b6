"""Many generated CUDA sources compiled for sm_90 by one nvcc run each preamble, for the tests that only ask
"does nvcc accept this kernel": an nvcc run costs about 1.5 s whatever it compiles (its startup and
cuda_fp16.h), a kernel about 0.1 s more.

Sources whose preamble (TVM's headers and helpers, everything before the first `extern "C"`) is the
same text share one translation unit: that preamble once, then each source's kernels, renamed
`<name>_s<i>` so that equal names do not collide. Each renamed kernel must be an `.entry` of the PTX.
Where a batch fails, each of its sources is compiled alone, so that a failure names its source and
shows nvcc's own message for it."""
from __future__ import annotations

import re

SM90 = {"kind": "cuda", "arch": "sm_90"}
KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(')


def nvcc_ptx(source: str) -> str:
    """One source's PTX, as nvcc writes it with TVM's flags (raises with nvcc's message if it fails)."""
    import tvm
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc").decode()


def _split(source: str) -> tuple[str, str]:
    first = KERNEL.search(source)
    assert first, f"no kernel in this CUDA source:\n{source[-2000:]}"
    return source[:first.start()], source[first.start():]


def _renamed(kernels: str, i: int) -> tuple[str, list[str]]:
    names = sorted(set(KERNEL.findall(kernels)))
    for name in names:
        kernels = re.sub(rf"\b{name}\b", f"{name}_s{i}", kernels)
    return kernels, [f"{name}_s{i}" for name in names]


def assert_nvcc_compiles(sources: list[str], labels: list | None = None) -> None:
    """Every source compiles with nvcc for sm_90 and each of its kernels is in the PTX; a failure names
    the source's label (its position where no labels are given) with nvcc's message."""
    labels = list(labels) if labels is not None else list(range(len(sources)))
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(_split(source)[0], []).append(i)
    for preamble, members in groups.items():
        parts = [_renamed(_split(sources[i])[1], i) for i in members]
        try:
            ptx = nvcc_ptx(preamble + "\n".join(kernels for kernels, _ in parts))
        except Exception:  # noqa: BLE001 - compiled one by one below, to say which source fails and why
            _one_by_one([sources[i] for i in members], [labels[i] for i in members])
            continue
        missing = [labels[i] for i, (_, names) in zip(members, parts)
                   if not all(re.search(rf"\.entry {name}\(", ptx) for name in names)]
        assert not missing, f"kernels missing from nvcc's PTX: {missing}"


def _one_by_one(sources: list[str], labels: list) -> None:
    failed = []
    for source, label in zip(sources, labels):
        try:
            assert ".entry" in nvcc_ptx(source)
        except Exception as e:  # noqa: BLE001 - every failing source is reported, not just the first
            errors = [line for line in str(e).splitlines() if "error" in line]   # not nvcc's warnings
            failed.append(f"{label}: " + "\n".join(errors[:20] or [str(e)[-1500:]]))
    assert not failed, "nvcc rejects:\n" + "\n".join(failed)


class AtModuleEnd:
    """Sources that a module's tests hand in (`add`), compiled in one batch when the module's tests are
    done (`check`, from a module fixture's teardown): a source nvcc rejects fails the run there, named
    by the test that handed it in. For tests whose sources come from their own parameters."""

    def __init__(self):
        self.sources: dict[str, str] = {}

    def add(self, label: str, source: str) -> None:
        self.sources[f"{label} #{len(self.sources)}"] = source

    def check(self) -> None:
        sources, self.sources = self.sources, {}
        if sources:
            assert_nvcc_compiles(list(sources.values()), list(sources))
