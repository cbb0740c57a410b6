"""GPU probe for issue 28 items 2-3 (fusion coverage, views): each user-style program compiled for the
GPU, its kernels listed with their rules, its results compared with torch on the GPU, and its time
against torch eager (and torch.compile with --inductor). Run: python benchmarks/probes/fusion.py [--inductor]
Prints one line per program: kernels, rules, max error, bt / eager / inductor microseconds."""
import sys
import time

import torch
import torch.nn.functional as F

import babytriton as bt

INDUCTOR = "--inductor" in sys.argv


def group_norm(x, w, b):
    n, c, h, ww = x.shape
    y = x.reshape(n, 32, -1)
    mean = y.mean(-1, keepdim=True)
    var = y.var(-1, keepdim=True, unbiased=False)
    y = (y - mean) / torch.sqrt(var + 1e-5)
    return y.reshape(n, c, h, ww) * w.reshape(1, c, 1, 1) + b.reshape(1, c, 1, 1)


def instance_norm(x):
    n, c = x.shape[0], x.shape[1]
    y = x.view(n, c, -1)
    mean, var = y.mean(-1, keepdim=True), y.var(-1, keepdim=True, unbiased=False)
    return ((y - mean) / (var + 1e-5).sqrt()).view(x.shape)


def mse(x, y):
    return ((x - y) ** 2).mean()


def kl_batchmean(log_p, q):
    return F.kl_div(log_p, q, reduction="batchmean")


def kl_by_hand(log_p, q):
    return (q * (q.log() - log_p)).sum(-1).mean()


def label_smoothed(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def max_and_argmax(x):
    return x.max(-1).values, x.argmax(-1)


def exp_and_sin(x):
    return x.exp(), x.sin()


def gathered_scaled(w, idx):
    return w[idx] * 2


def embedded_norm(w, idx):
    e = w[idx]
    return (e - e.mean(-1, keepdim=True)) / (e.var(-1, keepdim=True) + 1e-5).sqrt()


def transposed_rows(x):
    return x.t().sum(-1)


def transposed_norm(x):
    y = x.t()
    return (y - y.mean(-1, keepdim=True)) / y.std(-1, keepdim=True)


def middle_mean(x):
    return ((x.reshape(64, 64, -1) - 1) ** 2).mean(1)


def sliced_then_centred(x):
    y = x[:, 1:]
    return y - y.mean(-1, keepdim=True)


def column_mse(x, y):
    return ((x - y) ** 2).mean(0)


def batch_var(x):
    return x.var(0)


def cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


PROGRAMS = [
    (group_norm, lambda: (cuda(32, 256, 32, 32), cuda(256), cuda(256))),
    (instance_norm, lambda: (cuda(32, 256, 32, 32),)),
    (mse, lambda: (cuda(8192, 4096), cuda(8192, 4096))),
    (kl_batchmean, lambda: (cuda(8192, 1000).log_softmax(-1), cuda(8192, 1000).softmax(-1))),
    (kl_by_hand, lambda: (cuda(8192, 1000).log_softmax(-1), cuda(8192, 1000).softmax(-1))),
    (label_smoothed, lambda: (cuda(8192, 32000), torch.randint(0, 32000, (8192,), device="cuda"))),
    (max_and_argmax, lambda: (cuda(65536, 64),)),
    (exp_and_sin, lambda: (cuda(8192, 4096),)),
    (gathered_scaled, lambda: (cuda(50000, 1024), torch.randint(0, 50000, (16384,), device="cuda"))),
    (embedded_norm, lambda: (cuda(50000, 1024), torch.randint(0, 50000, (16384,), device="cuda"))),
    (transposed_rows, lambda: (cuda(8192, 4096),)),
    (transposed_norm, lambda: (cuda(4096, 8192),)),
    (middle_mean, lambda: (cuda(4096, 8192),)),
    (sliced_then_centred, lambda: (cuda(8192, 4097),)),
    (column_mse, lambda: (cuda(8192, 4096), cuda(8192, 4096))),
    (batch_var, lambda: (cuda(8192, 4096),)),
]


def timed(fn, args, reps=50) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def error(got, want) -> float:
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    return max(float((g.double() - w.double()).abs().max()) if g.numel() else 0.0 for g, w in zip(got, want))


def main():
    for fn, make in PROGRAMS:
        args = make()
        try:
            f = bt.jit(fn, target="gpu")
            k = f.compile(*args)
            kernels = "; ".join(f"{kern.name[:40]} {kern.rule} [{kern.launch}]" for kern in k.fusion)
            err = error(f(*args), fn(*args))
            ours, eager = timed(f, args), timed(fn, args)
            line = f"{fn.__name__:20s} {len(k.fusion)} kernels  err {err:.2e}  bt {ours:8.1f} us  eager {eager:8.1f} us"
            if INDUCTOR:
                line += f"  inductor {timed(torch.compile(fn), args):8.1f} us"
            print(line + f"  | {kernels}", flush=True)
        except Exception as e:  # noqa: BLE001 - a probe: report and go on
            print(f"{fn.__name__:20s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)


if __name__ == "__main__":
    main()
