"""The targets babytriton builds for: the `target` option checked and resolved to a TVM target, the
device kind it runs on, and whether matrix products go to torch there (read by code generation and
the pipeline alike, so both decide it once, the same way)."""
from __future__ import annotations

import dataclasses
import functools

import torch
import tvm

TARGET_ALIASES = {"cpu": "llvm", "llvm": "llvm", "gpu": "cuda", "cuda": "cuda"}
# Off a GPU, "gpu" still needs an architecture to generate CUDA for; Hopper is what we run on.
DEFAULT_CUDA_ARCH = "sm_90"


def check_target(target) -> None:
    """Validate a target option at decoration time, without touching any device."""
    if isinstance(target, tvm.target.Target):
        if target.kind.name not in ("llvm", "cuda"):
            raise ValueError(f"unsupported target kind {target.kind.name!r}; babytriton builds for llvm and cuda")
        return
    if isinstance(target, dict):
        check_target(tvm.target.Target(target))
        return
    if target not in TARGET_ALIASES:
        raise ValueError(f"unknown target {target!r}; use 'cpu' (or 'llvm'), 'gpu' (or 'cuda'), "
                         "or a tvm.target.Target")


def resolve_target(target) -> tvm.target.Target:
    """The concrete TVM target: the host CPU, or the local GPU's architecture (sm_90 without one)."""
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, dict):
        return tvm.target.Target(target)
    if TARGET_ALIASES[target] == "llvm":
        return tvm.target.Target.from_device(tvm.cpu())
    gpu = tvm.cuda(torch.cuda.current_device() if torch.cuda.is_available() else 0)   # a rank's own GPU
    if gpu.exist:
        return tvm.target.Target.from_device(gpu)
    return tvm.target.Target({"kind": "cuda", "arch": DEFAULT_CUDA_ARCH})


def device_kind(target: tvm.target.Target) -> str:
    return "cuda" if target.kind.name == "cuda" else "cpu"


@dataclasses.dataclass(frozen=True)
class MatmulOffload:
    """Which matrix products the pipeline hands to torch.matmul instead of generating a kernel:
    every product of `dtypes`, and float32 products of at most `small` multiply-adds (static sizes).
    `dtype in offload` asks the first (code generation widens a half product that stays a kernel)."""
    dtypes: tuple[str, ...] = ()
    small: int = 0

    def __contains__(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def takes(self, dtype: str, multiply_adds: int | None) -> bool:
        return dtype in self.dtypes or (dtype == "float32" and multiply_adds is not None
                                        and multiply_adds <= self.small)


# Measured per product, torch.matmul against CPUMatmul (16 threads on a Xeon with AVX512-FP16 and AMX;
# 2 on a Zen 5 core pair), float32: 64^3 10 / 44 us and 5 / 15 us; 512^3 291 / 337 us and 1,219 / 536 us;
# 2048^3 13.0 / 44.4 ms and 76.5 / 71.8 ms. float16: 512^3 314 / 714 us on the Xeon, and 101 ms
# against 0.7 ms on Zen 5, where torch has no half product kernel.
SMALL_PRODUCT = 1 << 20


def offloaded_matmuls(target: tvm.target.Target | None, schedule: str) -> MatmulOffload:
    """The matrix products the pipeline hands to torch.matmul. On a GPU every float one (cuBLAS, which
    accumulates halves in float32). On a CPU, where torch's kernel is the faster one:
    - bfloat16 always (oneDNN's AMX and AVX512-BF16 kernels; an MLP block at medium size: Xeon 1.1
      against 4.5 ms, Zen 5 2.6 against 5.5 ms);
    - float16 where the CPU does half arithmetic (AVX512-FP16 or AMX-FP16: oneDNN's kernels); without,
      torch's half product is a reference loop 100x slower than CPUMatmul;
    - float32 on Intel CPUs (MKL, whose AVX-512 kernels run only there), and elsewhere products of at
      most SMALL_PRODUCT multiply-adds: one thread of MKL's small-matrix code beats waking the pool.
    Products that stay kernels fuse with their neighbours."""
    if target is None or schedule != "dlight":
        return MatmulOffload()
    if target.kind.name == "cuda":
        return MatmulOffload(("float16", "bfloat16", "float32"))
    if target.kind.name != "llvm":
        return MatmulOffload()
    vendor, flags = host_cpu()
    dtypes = ["bfloat16"]
    if {"avx512_fp16", "amx_fp16"} & flags:
        dtypes.append("float16")
    if vendor == "GenuineIntel" and torch.backends.mkl.is_available():
        dtypes.append("float32")
    return MatmulOffload(tuple(dtypes), SMALL_PRODUCT)


@functools.cache
def host_cpu() -> tuple[str, frozenset[str]]:
    """The CPU's vendor and feature flags, as Linux reports them (nothing known elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "", frozenset()
    fields = dict(line.split(":", 1) for line in text.split("\n\n", 1)[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    # x86 names them vendor_id and flags; Arm, CPU implementer and Features
    vendor = fields.get("vendor_id", fields.get("CPU implementer", ""))
    return vendor, frozenset(fields.get("flags", fields.get("Features", "")).split())


def offloads_attention(target: tvm.target.Target | None, schedule: str) -> bool:
    """Whether attention blocks go to torch's scaled_dot_product_attention: on a GPU, and on a CPU too,
    where torch's flash-attention kernel beats a TIR product, softmax and product in a row."""
    return target is not None and target.kind.name in ("cuda", "llvm") and schedule == "dlight"
