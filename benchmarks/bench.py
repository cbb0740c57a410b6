"""babytriton against torch eager, torch.compile and (where installed) Triton on the corpus, in one run.

    python benchmarks/bench.py                      # GPU, full sizes on a CUDA machine; CPU, small sizes otherwise
    python benchmarks/bench.py --cpu                # CPU, small sizes
    python benchmarks/bench.py --cpu --sizes medium # CPU at sizes where "of copy" means something
    python benchmarks/bench.py --only softmax,rmsnorm --sizes full
    python benchmarks/bench.py --cpu --no-compile --threads 1 --budget 0.005 --only ...  # CI (tests/test_benchmarks.py)
    python benchmarks/bench.py --markdown out.md    # also write the tables to a file (for RESULTS.md)
    python benchmarks/bench.py --backward only      # only the forward+backward table

The workloads live in corpus.py. For each one the runner compiles the babytriton function, checks its
output against the torch function on the same inputs, counts its kernels, and times babytriton, torch
eager, torch.compile and (on a GPU, for softmax and the element-wise chain) a Triton kernel:
end-to-end Python calls (argument conversion and result wrapping included), median over batches, CUDA
events on the GPU. A workload that does not compile or does not match is a row "fails: <reason>".
"of copy" is a device copy of the same bytes, timed the same way, over babytriton's time. On a GPU,
"kernel of copy" compares device time alone (torch.profiler's record of the kernels a call launches,
against the copy's): where the call's host work outlasts its kernels (small inputs), the first says
what a caller sees and the second how near the kernels are to the memory's speed.

A second table times forward+backward for the workloads of corpus.BACKWARD: `out = f(*args);
out.backward(g)` with every floating-point tensor argument requiring grad (their .grad reset to None
before each call, so no accumulation is timed), against the same torch code eager and torch.compile'd
(AOTAutograd differentiates it). The gradients are checked against torch's; a backward that is not
compiled (babytriton's GradientFallbackWarning) is a row "fails: <reason>".
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch

import babytriton as bt
from babytriton import GradientFallbackWarning

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import BACKWARD, WORKLOADS, Workload, nbytes  # noqa: E402

COLUMNS = ["case", "kernels", "babytriton", "eager", "torch.compile", "triton",
           "GB/s", "of copy", "kernel of copy", "TFLOP/s", "eager/bt", "compile/bt"]


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


def copy_call(nbytes: int, device: str):
    """A device copy moving `nbytes` in all (half read, half written), as (function, arguments): the
    roofline in this run. The source is written first: on a CPU, reading never-touched memory reads
    the kernel's one zero page, which stays in cache, and such a "copy" took half the time of a real
    one (a 16-core Xeon: 169 against 320 us for 24 MB)."""
    half = max(1, nbytes // 2)
    src = torch.ones(half, dtype=torch.uint8, device=device)
    return torch.empty_like(src).copy_, (src,)


def copy_time(nbytes: int, device: str, gpu: bool, budget_s: float) -> float:
    """Seconds per call of `copy_call`, timed as the workloads are."""
    return time_call(*copy_call(nbytes, device), gpu, budget_s)


def kernel_time(fn, args, calls: int = 20) -> float | None:
    """GPU seconds per call that the kernels (and device copies) a call launches take, summed from
    torch.profiler's CUDA record of `calls` calls: no host work and no gaps between launches. None
    where the profiler records no device activity (no CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    device_us = sum(event.self_device_time_total for event in prof.key_averages()
                    if event.device_type == torch.autograd.DeviceType.CUDA)
    return device_us / 1e6 / calls if device_us > 0 else None


# --------------------------------------------------------------------------------------------------
# Triton kernels (GPU only, when Triton is installed)
# --------------------------------------------------------------------------------------------------

def triton_kernels() -> dict:
    """Triton versions by workload name: the element-wise chain and the row softmax."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return {}

    @triton.jit
    def elementwise_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(out_ptr + offsets, tl.sigmoid((a + b) * a - b).to(out_ptr.dtype.element_ty), mask=mask)

    def elementwise(a, b):
        out = torch.empty_like(a)
        elementwise_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
        return out

    @triton.jit
    def softmax_kernel(in_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n_cols
        x = tl.load(in_ptr + row * n_cols + offsets, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + offsets, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)

    def softmax(x):
        x = x.contiguous()
        cols = x.shape[-1]
        out = torch.empty_like(x)
        block = triton.next_power_of_2(cols)
        warps = 16 if block >= 4096 else 8 if block >= 2048 else 4
        softmax_kernel[(x.numel() // cols,)](x, out, cols, BLOCK=block, num_warps=warps)
        return out

    return {"elementwise": elementwise, "elementwise_fp16": elementwise, "softmax": softmax,
            "softmax_fp16": softmax, "softmax_bf16": softmax, "softmax_sym": softmax, "softmax_lib": softmax}


# --------------------------------------------------------------------------------------------------
# one workload
# --------------------------------------------------------------------------------------------------

def check_close(got, expected, tol: float) -> None:
    """babytriton's output(s) against torch's (same structure, dtype and shape)."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            raise AssertionError(f"returned {type(got).__name__}, torch returns {len(expected)} values")
        for g, e in zip(got, expected):
            check_close(g, e, tol)
        return
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


def count_kernels(kernel) -> int:
    """Kernel launches per call: the fused kernels in call order (library calls such as cuBLAS
    included), or the PrimFuncs of the scheduled module when there is no fusion map."""
    if len(kernel.fusion):
        return len(kernel.fusion)
    import tvm
    return sum(isinstance(fn, tvm.tirx.PrimFunc) for fn in kernel.module.functions.values())


def reason(error: Exception) -> str:
    """One line saying why a workload fails (a CompilationError's message, without its location)."""
    text = str(error).strip()
    if isinstance(error, AssertionError):
        lines = [line for line in text.splitlines() if line.startswith("Greatest")]
        return "wrong result: " + ("; ".join(lines) if lines else text.splitlines()[0] if text else "mismatch")
    if isinstance(error, GradientFallbackWarning):  # "... because of <construct> at <file>:<line>: <source>"
        what, _, where = text.partition("because of ")[2].rpartition(" at ")
        return f"backward not compiled: {what} at {os.path.basename(where)}"[:300]
    lines = text.splitlines() or [type(error).__name__]
    first = lines[0]
    if isinstance(error, bt.CompilationError) and ": error: " in first:
        first = first.split(": error: ", 1)[1]
        debug = [i for i, line in enumerate(lines) if line.startswith("[BABYTRITON_DEBUG]")]
        if debug:  # TVM's message; from a compiler log (NVRTC's), its error lines rather than its warnings
            head, *log = [lines[debug[0]].split("] ", 1)[1]] + [
                line.strip() for line in lines[debug[0] + 1:] if line.strip() and not line.startswith("    ")]
            errors = [line for line in log if "error" in line.lower()]
            first += " — " + " ".join([head] + (errors or log)[:2])
    return f"{type(error).__name__}: {first}"[:300]


def compile_and_check(w: Workload, args: tuple, target: str):
    """The jitted function after a checked call, its kernel count, torch's output."""
    f = bt.jit(target=target, cache=False)(w.bt_fn)
    debug = os.environ.get("BABYTRITON_DEBUG")
    os.environ["BABYTRITON_DEBUG"] = "1"  # a TVM failure's message then says what TVM said
    try:
        got = f(*args)
    finally:
        if debug is None:
            del os.environ["BABYTRITON_DEBUG"]
        else:
            os.environ["BABYTRITON_DEBUG"] = debug
    expected = w.torch_fn(*args)
    check_close(got, expected, w.tolerance())
    return f, count_kernels(f.compile(*args)), expected


def bench_workload(w: Workload, size: str, gpu: bool, use_compile: bool, budget: float, triton: dict) -> dict:
    device = "cuda" if gpu else "cpu"
    args = w.make(size, device)
    row = {"workload": w.name}
    try:
        f, row["kernels"], expected = compile_and_check(w, args, "gpu" if gpu else "cpu")
        row["babytriton"] = time_call(f, args, gpu, budget)
    except Exception as e:  # reported in the table: the corpus keeps workloads that fail today
        row["fails"] = reason(e)
        expected = w.torch_fn(*args)
    row["eager"] = time_call(w.torch_fn, args, gpu, budget)
    if use_compile:
        torch._dynamo.reset()
        try:
            compiled = torch.compile(w.torch_fn)
            compiled(*args)
            row["torch.compile"] = time_call(compiled, args, gpu, budget)
        except Exception as e:
            row["compile fails"] = reason(e)
    if gpu and w.name in triton:
        check_close(triton[w.name](*args), expected, w.tolerance())
        row["triton"] = time_call(triton[w.name], args, gpu, budget)
    if "babytriton" in row:
        moved = w.bytes_moved(args, expected)
        row["GB/s"] = moved / row["babytriton"] / 1e9
        row["of copy"] = copy_time(moved, device, gpu, budget) / row["babytriton"]
        if gpu:
            ours, copy = kernel_time(f, args), kernel_time(*copy_call(moved, device))
            if ours and copy:
                row["kernel of copy"] = copy / ours
        if w.flops:
            row["TFLOP/s"] = w.flops(args) / row["babytriton"] / 1e12
    return row


# --------------------------------------------------------------------------------------------------
# forward+backward
# --------------------------------------------------------------------------------------------------

def with_grad(args: tuple) -> tuple:
    """The arguments with every floating-point tensor a leaf that requires grad."""
    return tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


def grad_of_output(w: Workload, args: tuple) -> torch.Tensor:
    """The incoming gradient `g` of `out.backward(g)`: random like the output (seeded), 1 for a loss."""
    with torch.no_grad():
        out = w.torch_fn(*args)
    torch.manual_seed(1)
    return torch.randn(out.shape, dtype=torch.float32).to(out.device, out.dtype)


def fwd_bwd(fn, args: tuple, g: torch.Tensor):
    """A call of `out = fn(*args); out.backward(g)` (no arguments), and the leaves it fills."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def step():
        for a in leaves:
            a.grad = None
        fn(*args).backward(g)
    return step, leaves


def compile_and_check_backward(w: Workload, args: tuple, g: torch.Tensor, target: str):
    """The babytriton fwd+bwd step after a checked call (gradients against torch's; a backward that
    falls back to torch autograd is an error), its kernel count as "forward+backward"."""
    f = bt.jit(target=target, cache=False)(w.bt_fn)
    step, leaves = fwd_bwd(f, args, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientFallbackWarning)
        step()
    got = [a.grad for a in leaves]
    expected_step, _ = fwd_bwd(w.torch_fn, args, g)
    expected_step()
    check_close(tuple(got), tuple(a.grad for a in leaves), w.tolerance())
    forward = count_kernels(f.compile(*args))
    return step, f"{forward}+{count_kernels(f.backward(*args))}"


def bench_backward(w: Workload, size: str, gpu: bool, use_compile: bool, budget: float) -> dict:
    device = "cuda" if gpu else "cpu"
    args = with_grad(w.make(size, device))
    g = grad_of_output(w, args)
    row = {"workload": w.name}
    try:
        step, row["kernels"] = compile_and_check_backward(w, args, g, "gpu" if gpu else "cpu")
        row["babytriton"] = time_call(step, (), gpu, budget)
    except Exception as e:  # reported in the table
        row["fails"] = reason(e)
    row["eager"] = time_call(fwd_bwd(w.torch_fn, args, g)[0], (), gpu, budget)
    if use_compile:
        torch._dynamo.reset()
        try:
            compiled = fwd_bwd(torch.compile(w.torch_fn), args, g)[0]
            compiled()
            row["torch.compile"] = time_call(compiled, (), gpu, budget)
        except Exception as e:
            row["compile fails"] = reason(e)
    if "babytriton" in row:
        with torch.no_grad():
            out = w.torch_fn(*args)
        grads = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        # forward: the inputs and the output; backward: the inputs, g, and one gradient per input
        moved = 2 * nbytes(args) + nbytes(out) + nbytes(g) + nbytes(grads)
        row["GB/s"] = moved / row["babytriton"] / 1e9
        row["of copy"] = copy_time(moved, device, gpu, budget) / row["babytriton"]
    return row


# --------------------------------------------------------------------------------------------------
# overhead and compile time
# --------------------------------------------------------------------------------------------------

def bench_overhead(gpu: bool) -> dict:
    device = "cuda" if gpu else "cpu"

    @bt.jit(target="gpu" if gpu else "cpu", cache=False)
    def tiny(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
        return a + b

    a, b = torch.ones(2, 3, device=device), torch.ones(2, 3, device=device)
    tiny(a, b)
    return {"case": f"call overhead ({device}, 2x3)", "babytriton": time_call(tiny, (a, b), False),
            "eager": time_call(torch.add, (a, b), False)}


def elementwise_small(a: bt.Tensor((256, 256), "float32"), b: bt.Tensor((256, 256), "float32")):
    return bt.sigmoid((a + b) * a - b)


def bench_cold_compile() -> list[dict]:
    rows = []
    for target in ("cpu", {"kind": "cuda", "arch": "sm_90"}):
        samples = []
        for _ in range(3):
            f = bt.jit(target=target, cache=False)(elementwise_small)
            start = time.perf_counter()
            f.compile()
            samples.append(time.perf_counter() - start)
        name = "cpu" if target == "cpu" else "cuda codegen"
        rows.append({"case": f"cold compile ({name})", "babytriton": statistics.median(samples)})
    return rows


# --------------------------------------------------------------------------------------------------
# the tables
# --------------------------------------------------------------------------------------------------

def fmt_time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def fmt_rate(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def render(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        bt_time = row.get("babytriton")
        cells = [row["workload"], str(row.get("kernels", ""))]
        cells.append(fmt_time(bt_time) if bt_time else f"fails: {row['fails']}".replace("|", "\\|"))
        cells.append(fmt_time(row["eager"]))
        cells.append(fmt_time(row["torch.compile"]) if "torch.compile" in row else
                     "fails" if "compile fails" in row else "")
        cells.append(fmt_time(row["triton"]) if "triton" in row else "")
        cells.append(fmt_rate(row["GB/s"]) if "GB/s" in row else "")
        cells.append(f"{row['of copy']:.2f}" if "of copy" in row else "")
        cells.append(f"{row['kernel of copy']:.2f}" if "kernel of copy" in row else "")
        cells.append(fmt_rate(row["TFLOP/s"]) if "TFLOP/s" in row else "")
        cells.append(f"{row['eager'] / bt_time:.2f}x" if bt_time else "")
        cells.append(f"{row['torch.compile'] / bt_time:.2f}x" if bt_time and "torch.compile" in row else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_extra(rows: list[dict]) -> str:
    lines = ["| case | babytriton | eager |", "|---|---|---|"]
    for row in rows:
        eager = fmt_time(row["eager"]) if "eager" in row else ""
        lines.append(f"| {row['case']} | {fmt_time(row['babytriton'])} | {eager} |")
    return "\n".join(lines)


def select(only: str) -> list[Workload]:
    names = [n for n in only.split(",") if n]
    known = {w.name for w in WORKLOADS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [w for w in WORKLOADS if not names or w.name in names]


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is present")
    parser.add_argument("--only", default="", help="comma-separated workload names (see corpus.py)")
    parser.add_argument("--sizes", choices=("small", "medium", "full"),
                        help="input sizes (default: full on GPU, small on CPU; medium: 2^22-element chains, "
                        "1024x4096 rows, for CPU measurements)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--backward", choices=("also", "no", "only"), default="also",
                        help="the forward+backward table of corpus.BACKWARD's workloads: also (default), no, only")
    parser.add_argument("--skip-extra", action="store_true", help="skip call overhead and cold compile rows")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per measurement")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU): babytriton's parallel CPU "
                        "kernels run on torch's threads, so this sets both; 1 gives steadier numbers on a loaded machine")
    parser.add_argument("--markdown", help="also write the tables to this file")
    opts = parser.parse_args(argv)
    gpu = torch.cuda.is_available() and not opts.cpu
    if opts.threads:
        torch.set_num_threads(opts.threads)
    size = opts.sizes or ("full" if gpu else "small")
    workloads = select(opts.only)
    triton = triton_kernels() if gpu else {}
    rows = []
    for w in workloads if opts.backward != "only" else []:
        rows.append(bench_workload(w, size, gpu, not opts.no_compile, opts.budget, triton))
        print(render(rows[-1:]).splitlines()[-1], flush=True)
    backward_rows = []
    for w in [w for w in workloads if w.name in BACKWARD] if opts.backward != "no" else []:
        backward_rows.append(bench_backward(w, size, gpu, not opts.no_compile, opts.budget))
        print(render(backward_rows[-1:]).splitlines()[-1], flush=True)
    device = torch.cuda.get_device_name() if gpu else "CPU"
    text = (f"device: {device}; sizes: {size}; torch {torch.__version__} ({torch.get_num_threads()} CPU threads); "
            "times per call; "
            "x/bt = x's time / babytriton's (> 1: babytriton is faster)")
    for title, table in (("", rows), ("forward+backward (`out = f(*args); out.backward(g)`; kernels: forward+backward)",
                                      backward_rows)):
        if not table:
            continue
        failing = [r["workload"] for r in table if "fails" in r]
        text += (f"\n\n{title + chr(10) + chr(10) if title else ''}{render(table)}\n\n"
                 f"{len(table) - len(failing)} of {len(table)} workloads ran"
                 + (f"; failing: {', '.join(failing)}" if failing else ""))
    if not opts.skip_extra:
        extra = [bench_overhead(False)] + ([bench_overhead(True)] if gpu else []) + bench_cold_compile()
        text += "\n\n" + render_extra(extra)
    print("\n" + text)
    if opts.markdown:
        with open(opts.markdown, "w") as out:
            out.write(text + "\n")
    return text


if __name__ == "__main__":
    main()
