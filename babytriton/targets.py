"""The targets babytriton builds for: the `target` option checked and resolved to a TVM target, the
device kind it runs on, and whether matrix products go to torch there (read by code generation and
the pipeline alike, so both decide it once, the same way)."""
from __future__ import annotations

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
    if tvm.cuda().exist:
        return tvm.target.Target.from_device(tvm.cuda())
    return tvm.target.Target({"kind": "cuda", "arch": DEFAULT_CUDA_ARCH})


def device_kind(target: tvm.target.Target) -> str:
    return "cuda" if target.kind.name == "cuda" else "cpu"


def offloads(target: tvm.target.Target | None, schedule: str) -> bool:
    """Whether the pipeline hands float matrix products to torch on the GPU (cuBLAS
    accumulates float16 in float32). Not on a CPU: there `CPUMatmul` keeps them TIR kernels that fuse
    with their neighbours."""
    return target is not None and target.kind.name == "cuda" and schedule == "dlight"


def offloads_attention(target: tvm.target.Target | None, schedule: str) -> bool:
    """Whether attention blocks go to torch's scaled_dot_product_attention: on a GPU, and on a CPU too,
    where torch's flash-attention kernel beats a TIR product, softmax and product in a row."""
    return target is not None and target.kind.name in ("cuda", "llvm") and schedule == "dlight"
