"""The probes' GPU timer: median microseconds of one call, CUDA events around each call."""
import statistics

import torch


def gpu_time(fn, args, reps: int = 30) -> float:
    """Median microseconds of one call (three warm-up calls first)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)
