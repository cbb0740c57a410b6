"""Schedule variants measured side by side on the GPU, to choose babytriton's defaults.

    python benchmarks/variants.py      # needs a CUDA GPU
"""
import torch

import babytriton as bt
from babytriton import schedules
from bench import time_call


def row_sum(x):
    return x.sum(axis=-1)


def matmul(a, b):
    return a @ b


def with_rules(rules, fn, args, **options):
    saved = schedules.gpu_rules
    schedules.gpu_rules = lambda schedule: rules
    try:
        f = bt.jit(target="gpu", cache=False, **options)(fn)
        f(*args)
        return time_call(f, args, True)
    finally:
        schedules.gpu_rules = saved


def main():
    from tvm.s_tir import dlight as dl
    x = torch.randn(4096, 4096, device="cuda")
    default = schedules.gpu_rules("dlight")
    print(f"row_sum dlight Reduction      {with_rules([dl.gpu.Reduction(), dl.gpu.Fallback()], row_sum, (x,)) * 1e6:8.2f} us")
    for threads, unroll in ((256, 4), (256, 8), (512, 4), (128, 8)):
        rule = schedules.RowReduction(threads, unroll)
        print(f"row_sum RowReduction({threads},{unroll})  {with_rules([rule, dl.gpu.Fallback()], row_sum, (x,)) * 1e6:8.2f} us")
    print(f"row_sum torch eager           {time_call(torch.sum, (x, -1), True) * 1e6:8.2f} us")
    for dtype in (torch.float16, torch.float32):
        a = torch.randn(2048, 2048, device="cuda", dtype=dtype)
        b = torch.randn(2048, 2048, device="cuda", dtype=dtype)
        print(f"matmul {dtype} cuBLAS via VM  {with_rules(default, matmul, (a, b)) * 1e6:8.2f} us")
        print(f"matmul {dtype} torch eager    {time_call(torch.matmul, (a, b), True) * 1e6:8.2f} us")
        c = torch.empty_like(a)
        print(f"matmul {dtype} torch out=     {time_call(lambda: torch.matmul(a, b, out=c), (), True) * 1e6:8.2f} us")
    tiny = torch.randn(16, 16, device="cuda")
    print(f"matmul 16x16 via VM (overhead) {with_rules(default, matmul, (tiny, tiny)) * 1e6:8.2f} us")
    print(f"matmul 16x16 torch eager       {time_call(torch.matmul, (tiny, tiny), True) * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
