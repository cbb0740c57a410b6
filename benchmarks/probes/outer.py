"""GPU probe for reductions over outer or middle axes (issue 28): the OuterReduction rule against torch
eager and torch.compile, at sizes people run (a column sum of (8192, 4096), mean pooling of
(32, 2048, 1024) over the sequence, batch-norm statistics, group-norm-style (N, H, W) statistics).

    python benchmarks/probes/outer.py            # on the GPU machine: < 2 minutes on an H100
    python benchmarks/probes/outer.py --cpu      # the same programs on the CPU (smaller sizes), threads as torch's
    python benchmarks/probes/outer.py -k pairs,prologue --kernels   # the fuzzer's slow ones (p104, p46,
        # p56, p71, p22), each CUDA kernel's time too: < 1 minute

Each program is checked against torch, then timed with CUDA events (median of repeats); the table gives
babytriton's time, torch eager's and torch.compile's, the ratios (> 1: babytriton is faster) and the rule
and launch shape of each babytriton kernel."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


# -- the programs: PyTorch code as users write it ---------------------------------------------------

def column_sum(x):
    return x.sum(0)


def column_mean(x):
    return x.mean(dim=0)


def middle_max(x):
    return x.amax(dim=1)


def middle_max_values(x):
    return x.max(dim=1).values


def seq_mean_pool(x):
    return x.mean(dim=1)


def bn_stats(x):
    return x.mean(0), x.var(0, unbiased=False)


def centered(x):
    return x - x.mean(0)


def bn_normalise(x):
    mean = x.mean(0, keepdim=True)
    var = ((x - mean) ** 2).mean(0, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5)


def channel_stats(x):
    return x.mean(dim=(0, 2, 3))


def channel_sum_3d(x):
    return x.sum(dim=(0, 2))


def outer_two(x):
    return x.sum(dim=(0, 1))


def every_other(x):
    return x.sum(dim=(0, 2))


def int8_column_sum(x):
    return x.sum(0)


def half_column_sum(x):
    return x.sum(0)


def bf16_middle_mean(x):
    return x.float().mean(1)


def few_columns(x):
    return x.sum(0)


def masked_mean_pool(x, m):
    return (x * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)


def silu_pool_outer(x, y):  # p104: a prologue reading y broadcast along the reduced axis
    h = torch.nn.functional.silu(x).abs() / (1.0 + y * y)
    return h.amax(dim=0)


def values_and_indices_middle(x):  # p46: torch's max.dim over the second-to-last axis
    return x.max(dim=-2)


def values_and_indices_outer(x):  # p56: over the outer axis of three
    vals, idx = x.max(dim=0)
    return vals, idx


def column_argmax(x):
    return x.argmax(0)


def argmin_short_middle(x):  # p71: a short middle axis
    return torch.argmin(torch.sin(x).float(), dim=1)


def transposed_gelu_amax(x, y, w):  # p22: a transposed input, gelu, a max over the outer axis, an epilogue
    h = torch.nn.functional.gelu(torch.maximum(x.transpose(0, 1), y))
    return h / (h.abs().amax(-2, keepdim=True) + 1e-6) * w


def _two(x_shape, y_shape):
    return lambda dev: (torch.randn(*x_shape, device=dev), torch.randn(*y_shape, device=dev))


def _p22(n, c):
    return lambda dev: tuple(torch.randn(*s, device=dev, dtype=torch.bfloat16) for s in ((n, c), (c, n), (n,)))


def _randn(*shape, dtype=torch.float32):
    return lambda dev: (torch.randn(*shape, device=dev, dtype=torch.float32).to(dtype),)


def _int8(*shape):
    return lambda dev: (torch.randint(-128, 128, shape, device=dev, dtype=torch.int8),)


def _masked(b, s, h):
    return lambda dev: (torch.randn(b, s, h, device=dev), (torch.rand(b, s, device=dev) > 0.2).float())


# name: (function, GPU inputs, CPU inputs)
PROGRAMS = {
    "colsum 8192x4096": (column_sum, _randn(8192, 4096), _randn(2048, 1024)),
    "colsum 4096x1000": (column_sum, _randn(4096, 1000), _randn(1024, 1000)),
    "colmean 65536x96": (column_mean, _randn(65536, 96), _randn(16384, 96)),
    "colsum 2^20x4": (few_columns, _randn(1 << 20, 4), _randn(1 << 18, 4)),
    "colsum 2^18x33": (few_columns, _randn(1 << 18, 33), _randn(1 << 16, 33)),
    "middle amax 32x2048x1024": (middle_max, _randn(32, 2048, 1024), _randn(8, 512, 1024)),
    "middle max().values 64x197x768": (middle_max_values, _randn(64, 197, 768), _randn(16, 197, 768)),
    "mean pool 32x2048x1024": (seq_mean_pool, _randn(32, 2048, 1024), _randn(8, 512, 1024)),
    "mean pool 4x8192x4096": (seq_mean_pool, _randn(4, 8192, 4096), _randn(2, 2048, 1024)),
    "masked mean pool 32x512x768": (masked_mean_pool, _masked(32, 512, 768), _masked(8, 512, 768)),
    "bn stats 16384x1024": (bn_stats, _randn(16384, 1024), _randn(4096, 512)),
    "x - mean(0) 8192x4096": (centered, _randn(8192, 4096), _randn(2048, 1024)),
    "bn normalise 16384x1024": (bn_normalise, _randn(16384, 1024), _randn(4096, 512)),
    "channel mean (0,2,3) 32x256x56x56": (channel_stats, _randn(32, 256, 56, 56), _randn(8, 64, 56, 56)),
    "sum (0,2) 64x512x1024": (channel_sum_3d, _randn(64, 512, 1024), _randn(16, 256, 256)),
    "sum (0,1) 64x128x32x64": (outer_two, _randn(64, 128, 32, 64), _randn(16, 64, 32, 64)),
    "sum (0,2) 16x64x128x256": (every_other, _randn(16, 64, 128, 256), _randn(8, 32, 64, 128)),
    "int8 colsum 16384x4096": (int8_column_sum, _int8(16384, 4096), _int8(4096, 1024)),
    "fp16 colsum 16384x4096": (half_column_sum, _randn(16384, 4096, dtype=torch.float16),
                               _randn(4096, 1024, dtype=torch.float16)),
    "bf16 mean pool 32x2048x1024": (bf16_middle_mean, _randn(32, 2048, 1024, dtype=torch.bfloat16),
                                    _randn(8, 512, 1024, dtype=torch.bfloat16)),
    # the performance fuzzer's slow ones (seed 0), `-k pairs,prologue` (< 1 minute)
    "prologue p104 silu/(1+y^2) amax(0) 8192x32x12x16": (silu_pool_outer, _two((8192, 32, 12, 16), (1, 32, 12, 16)),
                                                          _two((1024, 32, 12, 16), (1, 32, 12, 16))),
    "pairs p46 max(dim=-2) fp16 967x32000": (values_and_indices_middle, _randn(967, 32000, dtype=torch.float16),
                                             _randn(967, 3200, dtype=torch.float16)),
    "pairs p56 max(dim=0) 138x128x1500": (values_and_indices_outer, _randn(138, 128, 1500), _randn(138, 128, 150)),
    "pairs p71 argmin(1) fp16 805x12x64": (argmin_short_middle, _randn(805, 12, 64, dtype=torch.float16),
                                           _randn(805, 12, 64, dtype=torch.float16)),
    "pairs argmax(0) 4096x4099": (column_argmax, _randn(4096, 4099), _randn(1024, 4099)),
    "prologue p22 transpose gelu amax bf16 784870x64": (transposed_gelu_amax, _p22(784870, 64), _p22(78487, 64)),
}


def _time(fn, args, device, repeats=15, calls=10):
    """Milliseconds of `fn(*args)`: on a GPU the median over `repeats` of CUDA events around `calls`
    calls in a row (the GPU stays busy while the host queues the next), on a CPU the fastest
    perf_counter run (a shared machine's other work only ever adds time)."""
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn(*args)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
        else:
            t = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times) if device == "cuda" else min(times)


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        tol = 1e-2 if w.dtype in (torch.float16, torch.bfloat16) else 1e-3
        torch.testing.assert_close(g.to(w.dtype), w, rtol=tol, atol=tol * 10)


def _without_outer_rules(jitted, args):
    """`jitted` compiled for `args` by the schedule rules as they were before OuterReduction and
    CPUOuterReduction (the same lists without them)."""
    from babytriton import schedules
    gpu_rules, cpu_rules = schedules.gpu_rules, schedules.cpu_rules
    outer = ("OuterReduction", "CPUOuterReduction")
    schedules.gpu_rules = lambda *a: [r for r in gpu_rules(*a) if schedules.rule_name(r) not in outer]
    schedules.cpu_rules = lambda *a: [r for r in cpu_rules(*a) if schedules.rule_name(r) not in outer]
    try:
        jitted.compile(*args)
    finally:
        schedules.gpu_rules, schedules.cpu_rules = gpu_rules, cpu_rules
    return jitted


def _try_outer(params: dict):
    """Every later compile with OuterReduction(**params) in place of the default one."""
    from babytriton import schedules
    gpu_rules = schedules.gpu_rules

    def rules(*args):
        return [schedules.Guarded(schedules.OuterReduction(**params)) if schedules.rule_name(r) == "OuterReduction"
                else r for r in gpu_rules(*args)]
    schedules.gpu_rules = rules


def _kernel_times(fn, args):
    """Each CUDA kernel's time (microseconds) in one call of `fn`, as torch.profiler measures it."""
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" and getattr(event, "device_time_total", 0):
            print(f"    {event.device_time_total:9.1f} us  {event.key[:100]}")


def main() -> int:
    import babytriton as bt
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("-k", default="", help="only programs whose name contains one of these (comma-separated)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (torch's, which babytriton uses)")
    parser.add_argument("--outer", default="", help="OuterReduction's parameters to try, e.g. threads=256,min_steps=8")
    parser.add_argument("--kernels", action="store_true",
                        help="also each CUDA kernel's time in one babytriton call (torch.profiler)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time babytriton without OuterReduction / CPUOuterReduction (the rules before)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.outer:
        _try_outer({k: int(v) for k, v in (item.split("=") for item in opts.outer.split(","))})
    device = "cpu" if opts.cpu else "cuda"
    target = "cpu" if opts.cpu else "gpu"
    rows, failures = [], 0
    print(f"{'program':36} {'bt ms':>8} {'eager':>8} {'compile':>8} {'vs eager':>8} {'vs comp':>8} "
          f"{'before':>8} {'vs bef':>7}  kernels")
    for name, (fn, gpu_inputs, cpu_inputs) in PROGRAMS.items():
        if not any(part in name for part in opts.k.split(",")):
            continue
        args = (cpu_inputs if opts.cpu else gpu_inputs)(device)
        try:
            jitted = bt.jit(target=target, cache=False)(fn)  # (the disk cache would keep an older rule's)
            kernels = ", ".join(f"{k.rule}[{k.launch}]" for k in jitted.compile(*args).fusion if k.rule)
            _close(jitted(*args), fn(*args))
            compiled = torch.compile(fn)
            t_bt, t_eager, t_comp = (_time(f, args, device) for f in (jitted, fn, compiled))
            t_before = _time(_without_outer_rules(bt.jit(target=target, cache=False)(fn), args), args, device) \
                if opts.baseline else float("nan")
        except Exception as error:  # noqa: BLE001 - a probe reports every program
            failures += 1
            print(f"{name:36} FAILED {type(error).__name__}: {str(error).splitlines()[0][:150]}")
            continue
        rows.append(t_comp / t_bt)
        print(f"{name:36} {t_bt:8.3f} {t_eager:8.3f} {t_comp:8.3f} {t_eager / t_bt:8.2f} {t_comp / t_bt:8.2f} "
              f"{t_before:8.3f} {t_before / t_bt:7.2f}  {kernels}", flush=True)
        if opts.kernels and not opts.cpu:
            _kernel_times(jitted, args)
    if rows:
        print(f"geometric mean vs torch.compile: {statistics.geometric_mean(rows):.2f}x over {len(rows)}; "
              f"min {min(rows):.2f}x; {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
