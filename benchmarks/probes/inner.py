"""GPU probe for reductions over the innermost axis (issue 28, item 1): babytriton vs torch eager vs
torch.compile on user-style row programs (an MoE router, KL divergence, label-smoothed cross-entropy,
softmax over 64 experts, rows of 1000 / 50257 / a symbolic width, max and argmax, sum and sum of
squares, two and three inputs), at realistic sizes. Checks every result against torch eager, times
each with CUDA events (median), and prints one table with the rule that scheduled each kernel.

    python benchmarks/probes/inner.py            # on the GPU machine: < 2 minutes on an H100
    python benchmarks/probes/inner.py --survey   # no GPU needed: build each program for sm_90 over a grid of
                                         # widths, dtypes and rows, and tabulate which rule took each kernel
"""
import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import babytriton as bt  # noqa: E402
from timing import gpu_time  # noqa: E402 - benchmarks/probes/timing.py
from babytriton import schedules  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}


# --------------------------------------------------------------------------------------------------
# the programs, as users write them (x: the rows; y: a second tensor of the same shape; w, b: a vector
# of the row's width; m: a bool mask of x's shape; t: an int64 index per row)
# --------------------------------------------------------------------------------------------------

def row_sum(x):
    return x.sum(-1)


def row_amax(x):
    return x.amax(dim=-1)


def mean_square(x):
    return x.pow(2).mean(-1)


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return F.log_softmax(x, dim=-1)


def logsumexp(x):
    return torch.logsumexp(x, dim=-1)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def row_dot(x, y):
    return (x * y).sum(-1)


def max_argmax(x):
    values, indices = x.max(dim=-1)
    return values, indices


def argmax(x):
    return x.argmax(dim=-1)


def sum_sumsq(x):
    return x.sum(-1), (x * x).sum(-1)


def row_stats(x):
    return x.mean(-1), x.var(-1), x.amax(-1)


def moe_router(x):
    probs = torch.softmax(x, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)


def masked_softmax(x, m):
    return x.masked_fill(m, float("-inf")).softmax(dim=-1)


def kl_divergence(x, y):
    log_p = F.log_softmax(x / 2.0, dim=-1)
    q = F.softmax(y / 2.0, dim=-1)
    return F.kl_div(log_p, q, reduction="batchmean") * 4.0


def ce_smoothed(x, t):
    return F.cross_entropy(x, t, label_smoothing=0.1)


# name -> (function, its arguments' kinds)
PROGRAMS = {f.__name__: (f, kinds) for f, kinds in [
    (row_sum, "x"), (row_amax, "x"), (mean_square, "x"), (softmax, "x"), (log_softmax, "x"), (logsumexp, "x"),
    (rmsnorm, "xw"), (layer_norm, "xwb"), (row_dot, "xy"), (max_argmax, "x"), (argmax, "x"), (sum_sumsq, "x"),
    (row_stats, "x"), (moe_router, "x"), (masked_softmax, "xm"), (kl_divergence, "xy"), (ce_smoothed, "xt")]}


def make_input(kind: str, rows: int, width: int, dtype: torch.dtype, device: str, gen: torch.Generator):
    """One argument of a program: rows x width values, a width vector, a mask or row indices."""
    if kind in "xy":
        return (torch.randn(rows, width, generator=gen, device=device) * 2).to(dtype)
    if kind in "wb":
        return (torch.rand(width, generator=gen, device=device) + 0.5).to(dtype)
    if kind == "m":
        return torch.rand(rows, width, generator=gen, device=device) < 0.1
    return torch.randint(0, width, (rows,), generator=gen, device=device)


def inputs(name: str, rows: int, width: int, dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(make_input(k, rows, width, dtype, device, gen) for k in PROGRAMS[name][1])


def symbolic(name: str, dtype: str):
    """The program with its arguments annotated with a symbolic row count and width (one build serves
    every size): `bt.Tensor(("n", "w"), dtype)`. (No `from __future__ import annotations` in this file:
    babytriton evaluates these annotations, which name local values.)"""
    fn, kinds = PROGRAMS[name]
    spec = {"x": (("n", "w"), dtype), "y": (("n", "w"), dtype), "w": (("w",), dtype), "b": (("w",), dtype),
            "m": (("n", "w"), "bool"), "t": (("n",), "int64")}
    a, b, c = [bt.Tensor(*spec[k]) for k in kinds] + [None] * (3 - len(kinds))
    if len(kinds) == 1:
        def one(x: a):
            return fn(x)
        return one
    if len(kinds) == 2:
        def two(x: a, y: b):
            return fn(x, y)
        return two

    def three(x: a, y: b, z: c):
        return fn(x, y, z)
    return three


# --------------------------------------------------------------------------------------------------
# --survey: which rule schedules each kernel (CUDA for sm_90; no GPU needed)
# --------------------------------------------------------------------------------------------------

NARROW = (1, 2, 7, 16, 32, 64)
WIDTHS = NARROW + (100, 1000, 4096, 50257, "w")
DTYPES = ("float32", "float16", "bfloat16")


def survey_cases():
    """(program, dtype, rows, width): every program at every width in float32 over 4096 rows, the
    half dtypes on softmax and max/argmax, 1 and 2^20 rows on narrow and wide rows."""
    for name in PROGRAMS:
        for width in WIDTHS:
            yield name, "float32", 4096, width
    for name in ("softmax", "max_argmax", "rmsnorm"):
        for dtype in DTYPES[1:]:
            for width in (64, 1000, 4096, 50257, "w"):
                yield name, dtype, 4096, width
    for name in ("row_sum", "softmax"):
        for rows, width in ((1, 64), (1, 4096), (1, 50257), (1 << 20, 16), (1 << 20, 64), (8, 1000)):
            yield name, "float32", rows, width


def build(name: str, dtype: str, rows: int, width):
    """The program compiled for sm_90 (meta tensors: nothing runs)."""
    if width == "w":
        return bt.jit(target=SM90)(symbolic(name, dtype)).compile()
    args = inputs(name, rows, width, getattr(torch, dtype), "cpu")
    return bt.jit(target=SM90)(PROGRAMS[name][0]).compile(*args)


def nvcc_fails(source: str) -> str:
    """'' when nvcc compiles the CUDA to PTX for sm_90, else its first error line."""
    import tvm
    from tvm.support import nvcc
    try:
        with tvm.target.Target(SM90):
            nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")
    except Exception as error:  # noqa: BLE001 - reported in the table
        return next((line for line in str(error).splitlines() if "error" in line), str(error))[:160]
    return ""


def survey(only: str | None, with_nvcc: bool) -> None:
    print("| program | dtype | rows | width | kernels: rule (launch) |")
    print("|---|---|---|---|---|")
    for name, dtype, rows, width in survey_cases():
        if only and only not in name:
            continue
        try:
            k = build(name, dtype, rows, width)
            cells = [f"{kk.rule} ({kk.launch})" + (f" [why: {kk.why}]" if kk.why else "")
                     for kk in k.fusion if kk.cuda_kernels or kk.rule]
            failed = nvcc_fails(k.source) if with_nvcc else ""
            cells += [f"NVCC FAILED: {failed}"] if failed else []
        except Exception as error:  # noqa: BLE001 - a failed build is a row of the table too
            cells = [f"BUILD FAILED: {type(error).__name__}: {str(error).splitlines()[0][:120]}"]
        print(f"| {name} | {dtype} | {rows} | {width} | {'; '.join(cells)} |", flush=True)


# --------------------------------------------------------------------------------------------------
# the GPU probe
# --------------------------------------------------------------------------------------------------

# (program, dtype, rows, width) at the sizes users run them
CASES = [
    ("moe_router", "float32", 32768, 64), ("kl_divergence", "float32", 8192, 4096),
    ("ce_smoothed", "float32", 2048, 32000), ("softmax", "float32", 32768, 64), ("softmax", "float16", 1 << 20, 16),
    ("softmax", "float32", 8192, 1000), ("softmax", "bfloat16", 2048, 50257), ("softmax", "float16", 8192, "w"),
    ("max_argmax", "float32", 32768, 64), ("max_argmax", "float16", 8192, 1000), ("argmax", "float32", 2048, 50257),
    ("sum_sumsq", "float32", 8192, 4096), ("row_stats", "float32", 65536, 100), ("row_dot", "bfloat16", 65536, 128),
    ("layer_norm", "float32", 16384, 1000), ("row_amax", "float16", 1 << 20, 7), ("softmax", "float16", 4096, 4096),
]
SYMBOLIC_SIZE = 4096  # the width a symbolic-width case runs at
# the cases also timed under other rule sets, to tune InnerReduction (see VARIANTS)
TUNING = [("softmax", "float32", 32768, 64), ("softmax", "float16", 1 << 20, 16), ("softmax", "float32", 8192, 1000),
          ("softmax", "bfloat16", 2048, 50257), ("max_argmax", "float16", 8192, 1000),
          ("softmax", "float16", 4096, 4096),
          ("row_dot", "bfloat16", 65536, 128), ("row_sum", "float16", 8192, 4096)]


def _swap(rules, find, make):
    """The rule list with each rule for which find(rule) holds replaced by make(rule) (None: dropped)."""
    out = []
    for guarded in rules:
        rule = getattr(guarded, "rule", guarded)
        if not find(rule):
            out.append(guarded)
        elif make(rule) is not None:
            out.append(schedules.Guarded(make(rule)))
    return out


def _inner_first(rules):
    """InnerReduction ahead of RowReduction and RowKernel (their fast paths then never run)."""
    inner = [g for g in rules if isinstance(getattr(g, "rule", None), schedules.InnerReduction)]
    rest = [g for g in rules if g not in inner]
    at = next(i for i, g in enumerate(rest) if isinstance(getattr(g, "rule", None), schedules.RowReduction))
    return rest[:at] + inner + rest[at:]


def _is(kind):
    return lambda rule: isinstance(rule, kind)


# name -> how the default GPU rules change: "before" is the rules without InnerReduction (RowKernel
# takes rows of 32 threads again): the numbers before this rule, measured in the same run
VARIANTS = {
    "before": lambda rules: _swap(_swap(rules, _is(schedules.InnerReduction), lambda r: None),
                                  _is(schedules.RowKernel), lambda r: schedules.RowKernel()),
    "inner first": _inner_first,
    "1 vector": lambda rules: _swap(rules, _is(schedules.InnerReduction),
                                    lambda r: schedules.InnerReduction(vectors=1)),
    "16 vectors": lambda rules: _swap(rules, _is(schedules.InnerReduction),
                                      lambda r: schedules.InnerReduction(vectors=16)),
    "256-thread blocks": lambda rules: _swap(rules, _is(schedules.InnerReduction),
                                             lambda r: schedules.InnerReduction(block_threads=256)),
}


@contextlib.contextmanager
def variant(name: str | None):
    """The GPU rules changed as VARIANTS[name] says, while the block runs (None: unchanged)."""
    original = schedules.gpu_rules
    if name is not None:
        schedules.gpu_rules = lambda schedule: VARIANTS[name](original(schedule))
    try:
        yield
    finally:
        schedules.gpu_rules = original


def ranked(name: str, args: tuple):
    """The values a program's indices point into (torch's), for comparing indices up to ties."""
    return torch.softmax(args[0], dim=-1) if name == "moe_router" else args[0]


def close(got, expected, dtype: torch.dtype, values=None) -> str:
    """'' when every result matches torch's (values to the dtype's tolerance; indices exactly, or where
    `values` is given, pointing at values as large: two equal maxima may be taken either way), else why."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(got) != len(expected):
        return f"{len(got)} results, torch {len(expected)}"
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-4)
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"result {i}: {tuple(g.shape)} {g.dtype}, torch {tuple(e.shape)} {e.dtype}"
        if not e.is_floating_point() and values is not None:
            picked, wanted = (values.gather(-1, t.unsqueeze(-1)).float() for t in (g, e))
            if not torch.allclose(picked, wanted, rtol=tol, atol=tol, equal_nan=True):
                return f"result {i}: {(g != e).sum().item()} indices differ, not at ties"
        elif not e.is_floating_point():
            if not torch.equal(g, e):
                return f"result {i}: {(g != e).sum().item()} indices differ"
        elif not torch.allclose(g.float(), e.float(), rtol=tol, atol=tol, equal_nan=True):
            return f"result {i}: max error {(g.float() - e.float()).abs().nan_to_num().max().item():.3g}"
    return ""


def ours(name: str, dtype_name: str, width, args, rules: str | None):
    """(us per call, '' or what differs from torch, the kernels' rules) of babytriton under a rule set."""
    fn = PROGRAMS[name][0]
    with variant(rules):
        k = bt.jit(target="gpu", cache=False)(symbolic(name, dtype_name) if width == "w" else fn).compile(*args)
    wrong = close(k(*args), fn(*args), getattr(torch, dtype_name), ranked(name, args))
    kernels = ", ".join(f"{kk.rule} ({kk.launch})" for kk in k.fusion if kk.cuda_kernels)
    return gpu_time(k, args), wrong, kernels


def probe_case(name: str, dtype_name: str, rows: int, width, compile_torch: bool) -> str:
    fn = PROGRAMS[name][0]
    args = inputs(name, rows, SYMBOLIC_SIZE if width == "w" else width, getattr(torch, dtype_name), "cuda")
    now, wrong, kernels = ours(name, dtype_name, width, args, None)
    before, was_wrong, _ = ours(name, dtype_name, width, args, "before")
    eager = gpu_time(fn, args)
    compiled = gpu_time(torch.compile(fn), args) if compile_torch else float("nan")
    check = "OK" if not wrong else f"WRONG: {wrong}"
    check += f" (before: WRONG: {was_wrong})" if was_wrong else ""
    return (f"| {name} | {dtype_name} | {rows}x{width} | {now:.1f} | {before:.1f} | {before / now:.2f}x | "
            f"{eager:.1f} | "
            f"{compiled:.1f} | {compiled / now:.2f}x | {check} | {kernels} |")


def tuning_case(name: str, dtype_name: str, rows: int, width) -> str:
    args = inputs(name, rows, SYMBOLIC_SIZE if width == "w" else width, getattr(torch, dtype_name), "cuda")
    cells = []
    for rules in (None, *[v for v in VARIANTS if v != "before"]):
        us, wrong, kernels = ours(name, dtype_name, width, args, rules)
        launch = kernels.split(" (", 1)[1].rstrip(")") if "InnerReduction" in kernels and kernels.count("(") == 1 \
            else kernels
        cells.append(f"{us:.1f}{' WRONG' if wrong else ''} [{launch}]")
    return f"| {name} | {dtype_name} | {rows}x{width} | " + " | ".join(cells) + " |"


def probe(budget: float, deadline: float) -> None:
    print(f"{torch.cuda.get_device_name()}; times in us (median of CUDA events); 'before': without InnerReduction")
    print("| program | dtype | size | babytriton | before | before/now | eager | torch.compile | compile/bt | check "
          "| kernels: rule (launch) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    start = time.time()
    for case in CASES:
        try:
            line = probe_case(*case, compile_torch=time.time() - start < budget)
        except Exception as error:  # noqa: BLE001 - one failing case must not hide the others
            line = f"| {case[0]} | {case[1]} | {case[2]}x{case[3]} | FAILED: {type(error).__name__}: {error} |"
        print(line, flush=True)
        torch._dynamo.reset()
    names = [v for v in VARIANTS if v != "before"]
    print(f"\nInnerReduction's parameters (us [launch]): default, {', '.join(names)}")
    print("| program | dtype | size | default | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for case in TUNING:
        if time.time() - start > deadline:
            print(f"| {case[0]} | {case[1]} | {case[2]}x{case[3]} | skipped: past {deadline:.0f} s |")
            continue
        try:
            print(tuning_case(*case), flush=True)
        except Exception as error:  # noqa: BLE001
            print(f"| {case[0]} | {case[1]} | {case[2]}x{case[3]} | FAILED: {type(error).__name__}: {error} |")
    print(f"wall {time.time() - start:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--survey", action="store_true", help="tabulate the rules for sm_90 (no GPU needed)")
    parser.add_argument("--only", help="programs whose name contains this (--survey)")
    parser.add_argument("--nvcc", action="store_true", help="--survey: compile each CUDA source with nvcc too")
    parser.add_argument("--budget", type=float, default=70, help="seconds after which torch.compile is skipped")
    parser.add_argument("--deadline", type=float, default=100, help="seconds after which the tuning rows are skipped")
    opts = parser.parse_args()
    survey(opts.only, opts.nvcc) if opts.survey else probe(opts.budget, opts.deadline)
