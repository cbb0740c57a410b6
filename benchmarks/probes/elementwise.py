"""Element-wise kernels as users write them (issue 28, item 1): babytriton against torch eager and
torch.compile, with each kernel's rule and launch shape.

    python benchmarks/probes/elementwise.py            # GPU (CUDA events; < 2 minutes on an H100)
    python benchmarks/probes/elementwise.py --cpu      # CPU, smaller sizes (rough ratios on a busy machine)
    python benchmarks/probes/elementwise.py --table    # no timing: the rule and launch of every kernel,
                                               # built for sm_90 and for the CPU (no GPU needed)
    python benchmarks/probes/elementwise.py --only add_T,permute_mul

The programs cover the element-wise space: ranks 1-4, 2^16..2^24 elements, ragged sizes (not
multiples of 1024, odd row widths) and symbolic ones, inputs read across their contiguous axis
(`a + b.T`, permutes, `.transpose(1, 2).contiguous()`), broadcasts along every axis, slices and split
halves, a gather, float32/float16/bfloat16/int8/bool results, several results. Each result is checked
against torch eager. "of copy" is the kernel time of a device copy of the same bytes (read + written)
over babytriton's kernel time (torch.profiler), so 1.0 is a copy's speed; "fb/bt" is the kernel time of
the same program on Dlight's Fallback alone (one thread per element: what transposes, ragged and
symbolic sizes, odd slices and gathers got before Tiled and Elementwise's flat vectors) over babytriton's.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

import torch

import babytriton as bt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks"))
from bench import copy_call, kernel_time, time_call  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}


@dataclass(frozen=True)
class Arg:
    """A tensor argument: `shape` stored contiguous, passed as `.permute(view)` where set; fill:
    randn | positive | int8 | index:<high> | mask."""
    shape: tuple
    dtype: str = "float32"
    fill: str = "randn"
    view: tuple | None = None

    def make(self, device: str, gen: torch.Generator) -> torch.Tensor:
        kw = {"generator": gen, "device": device}
        if self.fill == "int8":
            t = torch.randint(-127, 128, self.shape, dtype=torch.int8, **kw)
        elif self.fill == "mask":
            t = torch.rand(self.shape, **kw) < 0.3
        elif self.fill.startswith("index:"):
            t = torch.randint(0, int(self.fill.split(":")[1]), self.shape, **kw)
        elif self.fill == "positive":
            t = (torch.rand(self.shape, **kw) + 0.5).to(getattr(torch, self.dtype))
        else:
            t = torch.randn(self.shape, **kw).to(getattr(torch, self.dtype))
        return t.permute(self.view) if self.view else t


@dataclass(frozen=True)
class Program:
    name: str
    fn: object
    gpu: tuple          # Args at GPU sizes
    cpu: tuple          # Args at CPU sizes
    note: str = ""


PROGRAMS: list[Program] = []


def program(gpu, cpu, note=""):
    def register(fn):
        PROGRAMS.append(Program(fn.__name__, fn, tuple(gpu), tuple(cpu), note))
        return fn
    return register


F32, F16, BF16 = "float32", "float16", "bfloat16"


# -- read across the contiguous axis ---------------------------------------------------------------

@program([Arg((4096, 4096)), Arg((4096, 4096))], [Arg((1024, 1024)), Arg((1024, 1024))], "a + b.T, 2^24")
def add_T(a, b):
    return a + b.T


@program([Arg((4096, 2048), F16), Arg((2048, 4096), F16)], [Arg((1024, 512), F16), Arg((512, 1024), F16)])
def add_T_f16(a, b):
    return a + b.T


@program([Arg((32, 512, 256)), Arg((32, 256, 512))], [Arg((8, 256, 128)), Arg((8, 128, 256))], "rank 3")
def permute_mul(x, y):
    return x.permute(0, 2, 1) * y


@program([Arg((16, 1024, 512), F16)], [Arg((4, 512, 256), F16)], "a transposing copy")
def transpose_contiguous(x):
    return x.transpose(1, 2).contiguous()


@program([Arg((8, 64, 128, 64), BF16)], [Arg((2, 64, 32, 64), BF16)], "NCHW -> NHWC style, rank 4")
def permute_4d(x):
    return x.permute(0, 2, 3, 1) * 2.0


@program([Arg((64, 32, 1024))], [Arg((16, 32, 256))], "rows move, each stays contiguous")
def permute_rows(x):
    return x.permute(1, 0, 2) + 1.0


@program([Arg((3000, 1001)), Arg((1001, 3000))], [Arg((600, 301)), Arg((301, 600))], "ragged transpose")
def add_T_ragged(a, b):
    return a + b.T


@program([Arg((4096, 4096)), Arg((4096, 4096), view=(1, 0))], [Arg((1024, 1024)), Arg((1024, 1024), view=(1, 0))],
         "an argument passed as a transposed view")
def add_view(a, b):
    return a * b + 1.0


# -- ragged and symbolic sizes ---------------------------------------------------------------------

@program([Arg((1_000_003,))], [Arg((300_007,))], "1-d, prime size")
def ragged_1d(x):
    return x * 2.0 + 1.0


@program([Arg((4099, 999), F16), Arg((4099, 999), F16)], [Arg((1031, 333), F16), Arg((1031, 333), F16)],
         "odd row width, half")
def ragged_rows(x, y):
    return torch.sigmoid(x) * y


@program([Arg((4097, 1001)), Arg((1001,))], [Arg((1031, 333)), Arg((333,))], "odd width + bias")
def ragged_bias(x, b):
    return torch.relu(x + b)


def symbolic_2d(x: bt.Tensor(("n", 4096), F32), y: bt.Tensor(("n", 4096), F32)):
    return x * y + 1.0


def symbolic_1d(x: bt.Tensor(("n",), F16)):
    return torch.tanh(x) * 0.5


PROGRAMS.append(Program("symbolic_2d", symbolic_2d, (Arg((3001, 4096)), Arg((3001, 4096))),
                        (Arg((301, 4096)), Arg((301, 4096))), "(n, 4096), n = 3001"))
PROGRAMS.append(Program("symbolic_1d", symbolic_1d, (Arg((5_000_001,), F16),), (Arg((500_001,), F16),),
                        "(n,) float16"))


# -- broadcasts along every axis, slices, split halves, a gather -----------------------------------

@program([Arg((256, 128, 512)), Arg((128, 512)), Arg((256, 1, 512)), Arg((256, 128, 1))],
         [Arg((64, 32, 128)), Arg((32, 128)), Arg((64, 1, 128)), Arg((64, 32, 1))], "each axis broadcast")
def broadcast_axes(x, s0, s1, s2):
    return x * s0 + s1 * s2


@program([Arg((16, 256, 64, 64), F16), Arg((256,), F16), Arg((256,), F16)],
         [Arg((4, 64, 16, 16), F16), Arg((64,), F16), Arg((64,), F16)], "per-channel scale, rank 4")
def channel_affine(x, w, b):
    return x * w[None, :, None, None] + b[None, :, None, None]


@program([Arg((8192, 4096)), Arg((8192, 1))], [Arg((1024, 512)), Arg((1024, 1))], "erf(x) * s, s per row")
def erf_scaled(x, s):
    return torch.erf(x) * s


@program([Arg((8192, 4096))], [Arg((1024, 1024))], "x[:, :2000]")
def slice_cols(x):
    return x[:, :2000] * 2.0


@program([Arg((8192, 4096))], [Arg((1024, 1024))], "x[:, 1:]: unaligned")
def slice_offset(x):
    return x[:, 1:] + 1.0


@program([Arg((8192, 8192), BF16)], [Arg((512, 1024), BF16)], "chunk halves")
def split_halves(x):
    a, g = x.chunk(2, dim=-1)
    return a * torch.sigmoid(g)


@program([Arg((50000, 256)), Arg((65536,), fill="index:50000")], [Arg((5000, 128)), Arg((8192,), fill="index:5000")],
         "rows gathered")
def gather_rows(table, idx):
    return table[idx] * 2.0


@program([Arg((4096, 1024)), Arg((4096, 1024), fill="index:1024")],
         [Arg((512, 256)), Arg((512, 256), fill="index:256")], "torch.gather along the row")
def gather_elements(x, idx):
    return torch.gather(x, 1, idx) + 1.0


# -- dtypes and several results --------------------------------------------------------------------

@program([Arg((8192, 4096), F16), Arg((8192, 4096), F16)], [Arg((1024, 1024), F16), Arg((1024, 1024), F16)],
         "issue 28: 0.46x on CPU")
def clamp_polynomial_fp16(x, y):
    t = torch.clamp(x, -2.0, 2.0)
    return 0.5 * t * t * t - 1.5 * t + y


@program([Arg((8192, 4096), BF16), Arg((8192, 4096), BF16)], [Arg((1024, 1024), BF16), Arg((1024, 1024), BF16)])
def gated_chain_bf16(x, y):
    return torch.sigmoid(x) * y + torch.tanh(x * 0.5) - 0.25 * y


@program([Arg((8192, 4096)), Arg((8192, 1), fill="positive")], [Arg((1024, 1024)), Arg((1024, 1), fill="positive")],
         "issue 28: 0.55x on CPU")
def quantise_int8(x, s):
    return torch.clamp(torch.round(x / s), -128, 127).to(torch.int8)


@program([Arg((8192, 4096), fill="int8"), Arg((4096,))], [Arg((1024, 1024), fill="int8"), Arg((1024,))])
def dequantise_int8(q, s):
    return q.float() * s


@program([Arg((8192, 4096)), Arg((8192, 4096))], [Arg((1024, 1024)), Arg((1024, 1024))], "bool result")
def compare(x, y):
    return (x > y) | torch.isnan(x)


@program([Arg((8192, 4096), fill="mask"), Arg((8192, 4096), F16)],
         [Arg((1024, 1024), fill="mask"), Arg((1024, 1024), F16)])
def masked_fill(m, x):
    return x.masked_fill(m, 0.0)


@program([Arg((1 << 24,)), Arg((1 << 24,))], [Arg((1 << 20,)), Arg((1 << 20,))], "two results")
def two_results(x, y):
    return x + y, x * y


@program([Arg((4096, 2048)), Arg((2048, 4096))], [Arg((512, 256)), Arg((256, 512))], "two results, one transposed")
def two_results_T(a, b):
    s = a + b.T
    return s, torch.relu(s)


# --------------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------------

def make(p: Program, device: str) -> tuple:
    gen = torch.Generator(device=device).manual_seed(0)
    return tuple(a.make(device, gen) for a in (p.cpu if device == "cpu" else p.gpu))


def kernels(k) -> list[str]:
    """"name: rule launch" for each kernel of a compiled function."""
    return [f"{e.name}: {e.rule or 'none'} {e.launch}" for e in k.fusion]


def table(programs, target, device_args: str) -> None:
    """Each program's kernels, rules and launches built for `target` (arguments of `device_args` sizes)."""
    for p in programs:
        args = make(p, "cpu") if device_args == "cpu" else tuple(
            a.make("cpu", torch.Generator().manual_seed(0)) for a in p.gpu)
        start = time.perf_counter()
        try:
            k = bt.jit(p.fn, target=target).compile(*args)
            rows = kernels(k)
        except Exception as e:  # noqa: BLE001 - a failure is a row
            rows = [f"FAILS: {type(e).__name__}: {str(e).splitlines()[0][:150]}"]
        print(f"{p.name:24s} ({time.perf_counter() - start:4.1f} s)  " + "\n    ".join([""] + rows), flush=True)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check(got, expected) -> str:
    for g, e in zip(as_tuple(got), as_tuple(expected)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"shape/dtype {tuple(g.shape)} {g.dtype} != {tuple(e.shape)} {e.dtype}"
        tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2}.get(e.dtype, 1e-5)  # bfloat16: an ulp of 4
        if e.is_floating_point():
            if not torch.allclose(g.float(), e.float(), atol=tol, rtol=tol, equal_nan=True):
                return f"max err {(g.float() - e.float()).abs().nan_to_num().max().item():.3g}"
        elif e.dtype == torch.int8:
            if (g.int() - e.int()).abs().max().item() > 1:  # a round-half tie computed in another order
                return "int8 differs by more than 1"
        elif not torch.equal(g, e):
            return "differs"
    return "ok"


def moved_bytes(args, out) -> int:
    return sum(t.numel() * t.element_size() for t in (*args, *as_tuple(out)))


def measure(p: Program, device: str, budget: float) -> str:
    gpu = device == "cuda"
    args = make(p, device)
    expected = p.fn(*args)
    f = bt.jit(p.fn, target="gpu" if gpu else "cpu")
    try:
        got = f(*args)
        k = f.compile(*args)
    except Exception as e:  # noqa: BLE001
        return f"{p.name:24s} FAILS {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    ok = check(got, expected)
    compiled = torch.compile(p.fn)
    compiled(*args)
    t_bt, t_eager, t_comp = (time_call(fn, args, gpu, budget, 5) for fn in (f, p.fn, compiled))
    of_copy = before = ""
    if gpu:
        copy, copy_args = copy_call(moved_bytes(args, expected), device)
        mine, theirs = kernel_time(f, args), kernel_time(copy, copy_args)
        of_copy = f"{theirs / mine:5.2f}" if mine and theirs else "  -  "
        fallback = bt.jit(p.fn, target="gpu", schedule="fallback")  # every kernel one thread per element
        old = kernel_time(fallback, args)
        before = f"{old / mine:5.2f}" if mine and old else "  -  "
    rules = "; ".join(f"{e.rule or 'none'} {e.launch}" for e in k.fusion)
    return (f"{p.name:24s} {t_bt * 1e6:9.1f} {t_eager * 1e6:9.1f} {t_comp * 1e6:9.1f} {t_eager / t_bt:6.2f} "
            f"{t_comp / t_bt:6.2f} {of_copy:>6s} {before:>6s}  {ok:5s} {rules}")


# the programs timed by default on a GPU: each kind once (torch.compile's compiles dominate the run)
QUICK = ("add_T", "add_T_f16", "permute_mul", "transpose_contiguous", "permute_4d", "add_T_ragged", "ragged_1d",
         "ragged_bias", "symbolic_1d", "channel_affine", "erf_scaled", "slice_offset", "gather_elements",
         "clamp_polynomial_fp16", "quantise_int8", "two_results_T")


def tile_variants(programs, budget: float) -> None:
    """Kernel time of Tiled with float32 tiles of 32 (the default) and 64 per side."""
    from babytriton.schedules import transpose
    print("# Tiled tile side for 4-byte elements: kernel us at 32 / 64")
    for p in programs:
        args = make(p, "cuda")
        times = []
        for side in (32, 64):
            transpose._TILE[4] = side
            f = bt.jit(p.fn, target="gpu", cache=False)
            f(*args)
            times.append(kernel_time(f, args))
        transpose._TILE[4] = 32
        print(f"{p.name:24s} " + " / ".join(f"{t * 1e6:.1f}" if t else "-" for t in times))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="time on the CPU (smaller sizes)")
    parser.add_argument("--table", action="store_true", help="rules and launches for sm_90 and the CPU, no timing")
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--all", action="store_true", help="every program (default on a GPU: QUICK, < 2 minutes)")
    parser.add_argument("--tiles", action="store_true", help="also time Tiled with 64-wide float32 tiles")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of timing per function")
    opts = parser.parse_args(argv)
    device = "cpu" if opts.cpu or not torch.cuda.is_available() else "cuda"
    chosen = opts.only.split(",") if opts.only else None if opts.all or opts.table or device == "cpu" else QUICK
    programs = [p for p in PROGRAMS if chosen is None or p.name in chosen]
    if opts.table:
        print("== sm_90 (GPU sizes)")
        table(programs, SM90, "gpu")
        print("== cpu (CPU sizes)")
        table(programs, "cpu", "cpu")
        return
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"# {name}; times in us; ratios are theirs/babytriton (> 1: babytriton faster)")
    print(f"{'program':24s} {'bt':>9s} {'eager':>9s} {'compile':>9s} {'eag/bt':>6s} {'cmp/bt':>6s} {'ofcopy':>6s} "
          f"{'fb/bt':>6s}  check kernels")
    ratios = []
    for p in programs:
        line = measure(p, device, opts.budget)
        print(line, flush=True)
        parts = line.split()
        if "FAILS" not in line:
            ratios.append(float(parts[5]))
    if opts.tiles and device == "cuda":
        tile_variants([p for p in programs if p.name.startswith(("add_T", "permute", "transpose"))], opts.budget)
    if ratios:
        print(f"geometric mean torch.compile/babytriton: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f} "
              f"over {len(ratios)}; min {min(ratios):.2f}")


if __name__ == "__main__":
    main()
