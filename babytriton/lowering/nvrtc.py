"""How every generated GPU kernel is compiled: TVM's NVRTC (or nvcc) call, keeping subnormal floats,
with a lighter CUDA prologue.

TVM compiles with --use_fast_math, which also flushes subnormal floats to zero (-ftz=true); torch's
kernels keep them, so a value below 1.2e-38 became 0 and, in KL divergence's q * log(q), 0 * -inf =
NaN where torch gives a finite sum. `--ftz=false` after it keeps the fast approximate math and the
subnormals (TVM's own docs name this flag for that purpose).

TVM's CUDA source includes libcu++'s <cuda/std/type_traits> when NVRTC compiles it, for a few traits
that only some kernels use. Parsing that header took about 1.4 s of a 1.7 s
compile of a small kernel (with it: 1.68-1.75 s; without: 0.24-0.29 s, NVRTC 13.5 on this 2-core
machine; on an H100 host the whole prologue cost 1.25 s of 1.4 s). Kernels that use no `std::` name are compiled without
it; anything the slimmer source fails to compile is compiled again as TVM wrote it.
"""
from __future__ import annotations

import os
import re

import tvm
from tvm.support import nvcc

CALLBACK = "tvm_callback_cuda_compile"

# libcu++'s traits, pulled into namespace std for the fp8/fp4 helpers of some kernels
_TRAITS = re.compile(r"  #include <cuda/std/type_traits>\n  namespace std \{\n(?:    using cuda::std::\w+;\n)+  \}\n")
_PROLOGUE_END = "#else\n"


def slim(code: str) -> str:
    """`code` without the traits include of its NVRTC prologue, where nothing after the prologue
    uses a name from `std::`; else `code` itself."""
    found = _TRAITS.search(code)
    if found is None:
        return code
    rest = code.find(_PROLOGUE_END, found.end())
    if rest < 0 or "std::" in code[rest:]:
        return code
    return code[:found.start()] + code[found.end():]


KEEP_SUBNORMALS = ["--ftz=false"]


def _tvm_compile(code: str) -> bytes:
    """TVM's compile (nvcc.tvm_callback_cuda_compile) with subnormals kept: NVRTC to a cubin unless
    TVM_CUDA_COMPILE_MODE=nvcc asks for nvcc's fatbin."""
    if os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower() == "nvcc":
        return nvcc.compile_cuda(code, target_format="fatbin", compiler="nvcc", options=KEEP_SUBNORMALS)
    return nvcc.compile_cuda(code, target_format="cubin", compiler="nvrtc", options=KEEP_SUBNORMALS)


def _compile(code):
    lighter = slim(code)
    if lighter is not code:
        try:
            return _tvm_compile(lighter)
        except Exception:  # noqa: BLE001 - whatever failed, TVM's own prologue gets its chance
            pass
    return _tvm_compile(code)


def install() -> None:
    """Make TVM's CUDA builds go through `_compile` (idempotent)."""
    tvm.register_global_func(CALLBACK, _compile, override=True)
