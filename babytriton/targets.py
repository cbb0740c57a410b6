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


def offloaded_matmuls(target: tvm.target.Target | None, schedule: str) -> tuple[str, ...]:
    """The dtypes whose matrix products the pipeline hands to torch.matmul: every float on a GPU
    (cuBLAS, which accumulates halves in float32); bfloat16 only on a CPU, where torch's oneDNN
    kernels (AMX, AVX512-BF16) beat `CPUMatmul`'s products converted to float32 on every CPU measured
    (an MLP block at medium size: 16-core Xeon 1.1 against 4.5 ms, 2-core Zen 5 2.6 against 5.5 ms),
    while float32 and float16 stay TIR kernels that fuse with their neighbours (Zen 5: float32 2.4x
    torch's, float16 150x; Xeon: float32 1.0x on a 512^3 product)."""
    if target is None or schedule != "dlight":
        return ()
    return {"cuda": ("float16", "bfloat16", "float32"), "llvm": ("bfloat16",)}.get(target.kind.name, ())


def offloads_attention(target: tvm.target.Target | None, schedule: str) -> bool:
    """Whether attention blocks go to torch's scaled_dot_product_attention: on a GPU, and on a CPU too,
    where torch's flash-attention kernel beats a TIR product, softmax and product in a row."""
    return target is not None and target.kind.name in ("cuda", "llvm") and schedule == "dlight"
