"""babytriton against torch eager, torch.compile and (where installed) Triton, in one run.

    python benchmarks/bench.py            # GPU sizes on a CUDA machine, CPU sizes otherwise
    python benchmarks/bench.py --cpu      # CPU sizes, ratios vs torch eager (what CI smoke-tests)
    python benchmarks/bench.py --only softmax,matmul_fp16

Every row is timed in this process: end-to-end Python calls (argument conversion and result
wrapping included), median over repeats. ratio = torch.compile time / babytriton time (> 1: we win);
on CPU the ratio is against torch eager.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

import babytriton as bt

# --------------------------------------------------------------------------------------------------
# the functions, written once for babytriton and once for torch
# --------------------------------------------------------------------------------------------------


def bt_elementwise(a, b):
    return sigmoid((a + b) * a - b)  # noqa: F821 - a Relax op, resolved by babytriton


def torch_elementwise(a, b):
    return torch.sigmoid((a + b) * a - b)


def bt_softmax(x):
    return softmax(x, axis=-1)  # noqa: F821


def torch_softmax(x):
    return torch.softmax(x, dim=-1)


def bt_layer_norm(x, gamma, beta):
    return layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)  # noqa: F821


def torch_layer_norm(x, gamma, beta):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps=1e-5)


def bt_row_sum(x):
    return x.sum(axis=-1)


def torch_row_sum(x):
    return x.sum(dim=-1)


def bt_matmul(a, b):
    return a @ b


def torch_matmul(a, b):
    return a @ b


@dataclass
class Case:
    name: str
    bt_fn: Callable
    torch_fn: Callable
    make: Callable[[str], tuple]        # device -> arguments
    bytes_moved: Callable[[tuple], int] = None
    flops: Callable[[tuple], int] = None


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def cases(gpu: bool) -> list[Case]:
    n_elem = 1 << 26 if gpu else 1 << 20
    rows, cols = (4096, 4096) if gpu else (512, 512)
    mm = 2048 if gpu else 256

    def rnd(*shape, dtype=torch.float32, device="cpu"):
        return torch.randn(*shape, dtype=dtype, device=device)

    return [
        Case("elementwise", bt_elementwise, torch_elementwise,
             lambda d: (rnd(n_elem, device=d), rnd(n_elem, device=d)),
             bytes_moved=lambda a: _nbytes(*a) + _nbytes(a[0])),
        Case("softmax", bt_softmax, torch_softmax, lambda d: (rnd(rows, cols, device=d),),
             bytes_moved=lambda a: 2 * _nbytes(*a)),
        Case("layer_norm", bt_layer_norm, torch_layer_norm,
             lambda d: (rnd(rows, cols, device=d), rnd(cols, device=d), rnd(cols, device=d)),
             bytes_moved=lambda a: 2 * _nbytes(a[0])),
        Case("row_sum", bt_row_sum, torch_row_sum, lambda d: (rnd(rows, cols, device=d),),
             bytes_moved=lambda a: _nbytes(a[0])),
        Case("matmul_fp32", bt_matmul, torch_matmul,
             lambda d: (rnd(mm, mm, device=d), rnd(mm, mm, device=d)), flops=lambda a: 2 * mm ** 3),
        Case("matmul_fp16", bt_matmul, torch_matmul,
             lambda d: (rnd(mm, mm, dtype=torch.float16, device=d), rnd(mm, mm, dtype=torch.float16, device=d)),
             flops=lambda a: 2 * mm ** 3),
    ]


# --------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------

def time_call(fn, args, gpu: bool, budget_s: float = 0.3, repeats: int = 7) -> float:
    """Median seconds per call over `repeats` batches of back-to-back calls."""
    for _ in range(3):
        fn(*args)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    sync()
    start = time.perf_counter()
    fn(*args)
    sync()
    one = max(time.perf_counter() - start, 1e-7)
    number = max(1, min(10000, int(budget_s / repeats / one)))
    samples = []
    for _ in range(repeats):
        if gpu:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(number):
                fn(*args)
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end) / 1e3 / number)
        else:
            start = time.perf_counter()
            for _ in range(number):
                fn(*args)
            samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def triton_elementwise():
    """A Triton kernel for the element-wise chain, when Triton is installed (GPU only)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask)
        b = tl.load(b_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, tl.sigmoid((a + b) * a - b), mask=mask)

    def run(a, b):
        out = torch.empty_like(a)
        kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
        return out
    return run


# --------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------

def bench_kernels(gpu: bool, only: set | None, use_compile: bool) -> list[dict]:
    device = "cuda" if gpu else "cpu"
    target = "gpu" if gpu else "cpu"
    results = []
    for case in cases(gpu):
        if only and case.name not in only:
            continue
        args = case.make(device)
        f = bt.jit(target=target, cache=False)(case.bt_fn)
        expected = case.torch_fn(*args)
        got = f(*args)
        tol = 2e-2 if args[0].dtype == torch.float16 else 1e-3
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)
        row = {"case": case.name, "babytriton": time_call(f, args, gpu), "eager": time_call(case.torch_fn, args, gpu)}
        if use_compile:
            compiled = torch.compile(case.torch_fn)
            compiled(*args)
            row["torch.compile"] = time_call(compiled, args, gpu)
        if gpu and case.name == "elementwise":
            triton_fn = triton_elementwise()
            if triton_fn is not None:
                torch.testing.assert_close(triton_fn(*args), expected, rtol=1e-3, atol=1e-3)
                row["triton"] = time_call(triton_fn, args, gpu)
        if case.bytes_moved:
            row["GB/s"] = case.bytes_moved(args) / row["babytriton"] / 1e9
        if case.flops:
            row["TFLOP/s"] = case.flops(args) / row["babytriton"] / 1e12
        results.append(row)
    return results


def bench_overhead(gpu: bool) -> dict:
    device = "cuda" if gpu else "cpu"

    @bt.jit(target="gpu" if gpu else "cpu", cache=False)
    def tiny(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
        return a + b

    a, b = torch.ones(2, 3, device=device), torch.ones(2, 3, device=device)
    tiny(a, b)
    return {"case": f"call overhead ({device}, 2x3)", "babytriton": time_call(tiny, (a, b), False),
            "eager": time_call(torch.add, (a, b), False)}


def bench_cold_compile() -> list[dict]:
    rows = []
    for target in ("cpu", {"kind": "cuda", "arch": "sm_90"}):
        samples = []
        for _ in range(3):
            f = bt.jit(target=target, cache=False)(torch_elementwise_small)
            start = time.perf_counter()
            f.compile()
            samples.append(time.perf_counter() - start)
        name = "cpu" if target == "cpu" else "cuda codegen"
        rows.append({"case": f"cold compile ({name})", "babytriton": statistics.median(samples)})
    return rows


def torch_elementwise_small(a: bt.Tensor((256, 256), "float32"), b: bt.Tensor((256, 256), "float32")):
    return (a + b) * a - b


def fmt_time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:9.3f} ms"
    return f"{seconds * 1e6:9.2f} us"


def render(rows: list[dict], gpu: bool) -> str:
    header = ["case", "babytriton", "eager", "torch.compile", "triton", "GB/s", "TFLOP/s", "ratio"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        baseline = row.get("torch.compile") if gpu else row.get("eager")
        ratio = f"{baseline / row['babytriton']:.2f}x" if baseline else ""
        cells = [row["case"]]
        for key in ("babytriton", "eager", "torch.compile", "triton"):
            cells.append(fmt_time(row[key]).strip() if key in row else "")
        cells.append(f"{row['GB/s']:.0f}" if "GB/s" in row else "")
        cells.append(f"{row['TFLOP/s']:.1f}" if "TFLOP/s" in row else "")
        cells.append(ratio)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="CPU sizes even when a GPU is present")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--skip-extra", action="store_true", help="skip call overhead and cold compile rows")
    opts = parser.parse_args(argv)
    gpu = torch.cuda.is_available() and not opts.cpu
    only = set(filter(None, opts.only.split(",")))
    rows = bench_kernels(gpu, only, use_compile=gpu and not opts.no_compile)
    if not opts.skip_extra:
        rows.append(bench_overhead(False))
        if gpu:
            rows.append(bench_overhead(True))
        rows.extend(bench_cold_compile())
    device = torch.cuda.get_device_name() if gpu else "CPU"
    table = render(rows, gpu)
    vs = "torch.compile" if gpu else "torch eager"
    print(f"device: {device}; ratio = {vs} time / babytriton time\n{table}")
    return table


if __name__ == "__main__":
    main()
