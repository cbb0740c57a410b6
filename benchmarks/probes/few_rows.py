"""Few long rows on the GPU: SplitReduction's row kernels of several reductions, split over blocks
reduction after reduction, against the row rules' block a row (SplitReduction's chains turned off),
eager and torch.compile, each checked against eager first.

    python benchmarks/probes/few_rows.py        # on the GPU machine, about a minute
    python benchmarks/probes/few_rows.py rows   # RowKernel against InnerReduction, rows few and many
"""
import os
import sys

os.environ["BABYTRITON_CACHE"] = "0"    # both settings compile afresh
sys.path.insert(0, os.path.dirname(__file__))

import torch                                             # noqa: E402
import torch.nn.functional as F                          # noqa: E402

import babytriton as bt                                  # noqa: E402
from babytriton.schedules import split_reduction         # noqa: E402
from timing import gpu_time                              # noqa: E402


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-5)


def log_softmax(x):
    return F.log_softmax(x, dim=-1)


def group_norm(x):
    g = x.reshape(x.shape[0], 32, -1)
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    return ((g - mu) / torch.sqrt(var + 1e-5)).reshape(x.shape)


CASES = [(fn, shape) for fn in (softmax, layer_norm, log_softmax) for shape in
         ((1, 1 << 20), (1, 1545689), (8, 1 << 18), (32, 32000), (64, 32000), (128, 32000), (64, 8192),
          (128, 100003))] + [(group_norm, (1, 256, 64, 64)), (group_norm, (4, 256, 28, 28))]


def rms_norm(x):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


ROW_CASES = [(fn, shape) for fn in (softmax, layer_norm, rms_norm) for shape in
             ((64, 32000), (87, 32000), (108, 11008), (64, 11008), (256, 8192), (1142, 32000), (3351, 11008),
              (512, 4096))]


def row_rules():
    """RowKernel (a block a row, threads x vectors tiling the row exactly) against InnerReduction
    (RowKernel turned off) where rows are few: which fills an H200 better."""
    from babytriton.schedules import row_kernel
    original = row_kernel.RowKernel.apply
    print(f"{'program':<14}{'shape':<20}{'row us':>10}{'inner us':>10}{'eager us':>10}  rules")
    for fn, shape in ROW_CASES:
        x = torch.randn(shape, device="cuda")
        want = fn(x)
        times, rules = [], []
        for apply in (original, lambda self, *a: None):
            row_kernel.RowKernel.apply = apply
            f = bt.jit(target="gpu")(fn)
            torch.testing.assert_close(f(x), want, rtol=1e-4, atol=1e-4)
            times.append(gpu_time(f, (x,)))
            rules.append(" ".join(f"{k.rule} {k.launch}" for k in f.compile(x).fusion))
        row_kernel.RowKernel.apply = original
        print(f"{fn.__name__:<14}{str(shape):<20}{times[0]:>10.1f}{times[1]:>10.1f}{gpu_time(fn, (x,)):>10.1f}  "
              f"{' | '.join(rules)}", flush=True)


def main():
    original = split_reduction.SplitReduction._long
    print(f"{'program':<14}{'shape':<20}{'split us':>10}{'rows us':>10}{'eager us':>10}{'compile us':>11}  rules")
    for fn, shape in CASES:
        x = torch.randn(shape, device="cuda")
        want = fn(x)
        times, rules = [], []
        for long in (original, lambda self, sch, red: False):
            split_reduction.SplitReduction._long = long
            f = bt.jit(target="gpu")(fn)
            torch.testing.assert_close(f(x), want, rtol=1e-4, atol=1e-4)
            times.append(gpu_time(f, (x,)))
            rules.append("+".join(k.rule for k in f.compile(x).fusion))
        split_reduction.SplitReduction._long = original
        compiled = torch.compile(fn)
        eager, tc = gpu_time(fn, (x,)), gpu_time(compiled, (x,))
        print(f"{fn.__name__:<14}{str(shape):<20}{times[0]:>10.1f}{times[1]:>10.1f}{eager:>10.1f}{tc:>11.1f}  "
              f"{' | '.join(rules)}", flush=True)


if __name__ == "__main__":
    row_rules() if sys.argv[1:] == ["rows"] else main()
