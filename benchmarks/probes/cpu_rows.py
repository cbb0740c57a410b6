"""Row reductions and in-place updates on one CPU thread: babytriton against torch eager, each checked
against eager first; a markdown row per kernel (babytriton ms, eager ms, eager / babytriton).

    TVM_NUM_THREADS=1 taskset -c 1 python benchmarks/probes/cpu_rows.py   # about a minute

Pin it to a quiet core: these kernels are memory-bound and another process's traffic doubles them."""
import time

import torch
import torch.nn.functional as F
import babytriton as bt
torch.set_num_threads(1)
def row_max(x): return x.amax(-1)
def argmax_rows(x): return x.argmax(-1)
def sum_and_squares(x): return x.sum(-1), (x * x).sum(-1)
def moments(x): return x.mean(-1), x.std(-1), x.amax(-1), x.argmin(-1)
def log_softmax(x): return F.log_softmax(x, -1)
def softmax(x): return torch.softmax(x, -1)
def gumbel_argmax(logits, u): return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)
def router(logits):
    probs = torch.softmax(logits, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)
def axpy(y, x): y.add_(x * 2.0)
def bench(f, *a):
    for _ in range(3): f(*a)
    best = 1e9
    for _ in range(15):
        t = time.perf_counter(); f(*a); best = min(best, time.perf_counter() - t)
    return best * 1e3
g = torch.Generator().manual_seed(0)
cases = [(row_max, (torch.randn(32768, 64, generator=g),)), (row_max, (torch.randn(32768, 64, generator=g).bfloat16(),)),
         (row_max, (torch.randn(65536, 32, generator=g),)), (argmax_rows, (torch.randn(32768, 64, generator=g),)),
         (argmax_rows, (torch.randn(4096, 1000, generator=g),)), (sum_and_squares, (torch.randn(4096, 4096, generator=g),)),
         (moments, (torch.randn(4096, 1000, generator=g),)), (log_softmax, (torch.randn(32768, 64, generator=g),)),
         (softmax, (torch.randn(32768, 64, generator=g),)), (softmax, (torch.randn(4096, 1000, generator=g),)),
         (gumbel_argmax, (torch.randn(4096, 1000, generator=g), torch.rand(4096, 1000, generator=g).clamp_min(1e-6))),
         (router, (torch.randn(32768, 64, generator=g),)), (axpy, (torch.randn(1 << 24, generator=g), torch.randn(1 << 24, generator=g)))]
for fn, args in cases:
    k = bt.jit(fn, cache=False, target="cpu")
    got, want = k(*[a.clone() for a in args]), fn(*[a.clone() for a in args])
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        if g is not None:
            torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-4, atol=1e-4)
    b, e = bench(k, *args), bench(fn, *args)
    shape = "x".join(map(str, args[0].shape)) + ("" if args[0].dtype == torch.float32 else " " + str(args[0].dtype)[6:])
    print(f"| {fn.__name__} | {shape} | {b:.2f} | {e:.2f} | {e / b:.2f} |")
