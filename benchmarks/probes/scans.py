"""GPU check and timing of cumsum/cumprod as babytriton's own scan kernels (babytriton/operators/scans.py) against
torch eager (CUB's scans) and torch.compile (Inductor's Triton scan).

Run on the GPU machine, from the project root (after `source .gpu/setup.sh`):

    python benchmarks/probes/scans.py          # < 1 minute on an H100 (torch.compile skipped past --budget s)

One row per case: the check against torch (float32 reference, halves rounded once), babytriton's time,
eager's and torch.compile's (median µs by CUDA events), the ratios (> 1: babytriton faster), the
bandwidth babytriton reached (one read and one write of the tensor), and each kernel's rule and launch.
"""
from __future__ import annotations

import argparse
import time

import torch

import babytriton as bt
from timing import gpu_time  # noqa: E402 - benchmarks/probes/timing.py

DEVICE = "cuda"


def cumsum_along(x, axis: bt.constexpr):
    return torch.cumsum(x, dim=axis)


def cumprod_along(x, axis: bt.constexpr):
    return torch.cumprod(x, dim=axis)


def exclusive_along(x, axis: bt.constexpr):
    return bt.cumsum(x, axis=axis, exclusive=True)


def torch_exclusive(x, axis):
    y = torch.cumsum(x, dim=axis)
    return torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], dim=axis)


PROGRAMS = {"cumsum": (cumsum_along, lambda x, a: torch.cumsum(x, dim=a)),
            "cumprod": (cumprod_along, lambda x, a: torch.cumprod(x, dim=a)),
            "exclusive": (exclusive_along, torch_exclusive)}

# (program, shape, dtype, axis)
CASES = [
    ("cumsum", (8192, 4096), torch.float32, 1), ("cumsum", (8192, 4096), torch.float32, 0),
    ("cumsum", (8192, 4096), torch.float16, 1), ("cumsum", (8192, 4096), torch.bfloat16, 0),
    ("cumprod", (8192, 4096), torch.float32, 1),
    ("cumsum", (12, 16, 9158), torch.float32, 2), ("cumsum", (12, 16, 9158), torch.float32, 1),
    ("cumsum", (12, 16, 9158), torch.float32, 0),
    ("cumsum", (503, 2048), torch.float32, 1), ("cumsum", (503, 2048), torch.float32, 0),
    ("cumsum", (32, 2048, 1024), torch.float32, 1), ("cumsum", (1 << 20, 8), torch.float32, 1),
    ("exclusive", (4096, 1000), torch.float32, 1), ("cumsum", (4096, 1000), torch.int32, 1),
]


def make(shape, dtype) -> torch.Tensor:
    g = torch.Generator(device=DEVICE).manual_seed(0)
    if dtype.is_floating_point:
        return (1 + torch.randn(*shape, generator=g, device=DEVICE) / 64).to(dtype)
    return torch.randint(-3, 4, shape, generator=g, device=DEVICE).to(dtype)


def check(got, x, axis, reference) -> str:
    wide = torch.float32 if x.dtype.is_floating_point else torch.int64
    want = reference(x.to(wide), axis)
    if x.dtype in (torch.float16, torch.bfloat16):
        want = want.to(x.dtype)
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if x.dtype in (torch.float16, torch.bfloat16) else \
        {"rtol": 1e-4, "atol": 1e-5 * x.shape[axis]} if x.dtype.is_floating_point else {"rtol": 0, "atol": 0}
    try:
        torch.testing.assert_close(got.to(want.dtype), want, equal_nan=True, **tolerance)
        return "OK"
    except AssertionError as e:
        return "WRONG: " + str(e).splitlines()[1 if len(str(e).splitlines()) > 1 else 0][:80]


def row(name, shape, dtype, axis, compile_torch: bool) -> str:
    fn, reference = PROGRAMS[name]
    x = make(shape, dtype)
    jitted = bt.jit(fn, target="gpu")
    verdict = check(jitted(x, axis), x, axis, reference)
    kernels = "; ".join(f"{k.name}: {k.rule} ({k.launch})" for k in jitted.compile(x, axis).fusion)
    ours = gpu_time(jitted, (x, axis), reps=20)
    eager = gpu_time(reference, (x, axis), reps=20)
    compiled = gpu_time(torch.compile(reference, dynamic=False), (x, axis), reps=20) if compile_torch else float("nan")
    moved = 2 * x.numel() * x.element_size()
    return (f"| {name} | {tuple(shape)} | {str(dtype)[6:]} | {axis} | {verdict} | {ours:.1f} | {eager:.1f} | "
            f"{compiled:.1f} | {eager / ours:.2f}x | {compiled / ours:.2f}x | {moved / ours / 1e3:.0f} | {kernels} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=40, help="seconds after which torch.compile is skipped")
    opts = parser.parse_args()
    print("| program | shape | dtype | axis | check | babytriton µs | eager µs | torch.compile µs | eager/bt "
          "| compile/bt | bt GB/s | kernels: rule (launch) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    start = time.time()
    for name, shape, dtype, axis in CASES:
        print(row(name, shape, dtype, axis, time.time() - start < opts.budget), flush=True)


if __name__ == "__main__":
    main()
