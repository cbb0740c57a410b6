"""Row reductions and in-place updates on one CPU thread: babytriton against torch eager, each checked
against eager first; a markdown row per kernel (babytriton ms, eager ms, eager / babytriton).

    TVM_NUM_THREADS=1 taskset -c 1 python benchmarks/probes/cpu_rows.py   # about a minute

Pin it to a quiet core: these kernels are memory-bound and another process's traffic doubles them."""
import time

import torch
import torch.nn.functional as F

import babytriton as bt


def row_max(x):
    return x.amax(-1)


def argmax_rows(x):
    return x.argmax(-1)


def sum_and_squares(x):
    return x.sum(-1), (x * x).sum(-1)


def moments(x):
    return x.mean(-1), x.std(-1), x.amax(-1), x.argmin(-1)


def log_softmax(x):
    return F.log_softmax(x, -1)


def softmax(x):
    return torch.softmax(x, -1)


def gumbel_argmax(logits, u):
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


def router(logits):
    probs = torch.softmax(logits, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)


def axpy(y, x):
    y.add_(x * 2.0)


def best_ms(f, *args, runs: int = 15) -> float:
    for _ in range(3):
        f(*args)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        f(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def cases(gen: torch.Generator) -> list:
    def rows(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(dtype)
    return [(row_max, (rows(32768, 64),)), (row_max, (rows(32768, 64, dtype=torch.bfloat16),)),
            (row_max, (rows(65536, 32),)), (argmax_rows, (rows(32768, 64),)), (argmax_rows, (rows(4096, 1000),)),
            (sum_and_squares, (rows(4096, 4096),)), (moments, (rows(4096, 1000),)),
            (log_softmax, (rows(32768, 64),)), (softmax, (rows(32768, 64),)), (softmax, (rows(4096, 1000),)),
            (gumbel_argmax, (rows(4096, 1000), torch.rand(4096, 1000, generator=gen).clamp_min(1e-6))),
            (router, (rows(32768, 64),)), (axpy, (rows(1 << 24), rows(1 << 24)))]


def results(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def main() -> None:
    torch.set_num_threads(1)
    print("| kernel | shape | babytriton (ms) | eager (ms) | eager/bt |\n|---|---|---|---|---|")
    for fn, args in cases(torch.Generator().manual_seed(0)):
        k = bt.jit(fn, cache=False, target="cpu")
        for got, want in zip(results(k(*[a.clone() for a in args])), results(fn(*[a.clone() for a in args]))):
            if got is not None:
                torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
        ours, eager = best_ms(k, *args), best_ms(fn, *args)
        dtype = "" if args[0].dtype == torch.float32 else " " + str(args[0].dtype).removeprefix("torch.")
        print(f"| {fn.__name__} | {'x'.join(map(str, args[0].shape))}{dtype} | {ours:.2f} | {eager:.2f} | "
              f"{eager / ours:.2f} |")


if __name__ == "__main__":
    main()
