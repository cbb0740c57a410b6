"""The same Triton kernels compiled by Triton and by babytriton.triton, in one process (issue 30).

    python benchmarks/triton_vs.py            # on a GPU: Triton vs babytriton (and torch), the tutorials' sizes
    python benchmarks/triton_vs.py --cpu      # on the CPU: babytriton vs torch eager (Triton has no CPU backend)
    python benchmarks/triton_vs.py --only softmax,layer_norm

The kernels are tests/triton_language/kernels.py's (the tutorials' `@triton.jit` functions); the file is executed twice,
once with its imports as they are (babytriton.triton) and once with `import triton` /
`import triton.language as tl`, so both compilers get the very same source. Each row checks that the
results agree, then times both (median of triton.testing.do_bench on the GPU; wall clock on the CPU) and
prints babytriton's speed as a fraction of the other's ("ratio" > 1: babytriton faster).
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
import types

import torch

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "tests" / "triton_language" / "kernels.py"
BABY_IMPORTS = "import babytriton.triton as triton\nimport babytriton.triton.language as tl\n"
TRITON_IMPORTS = "import triton\nimport triton.language as tl\n"


def load(imports: str) -> dict:
    """kernels.py executed with `imports` in place of its own."""
    source = KERNELS.read_text()
    assert BABY_IMPORTS in source, "kernels.py's imports changed"
    module = types.ModuleType("kernels_" + imports.split()[1].replace(".", "_"))
    sys.modules[module.__name__] = module   # its dataclasses look their module up
    exec(compile(source.replace(BABY_IMPORTS, imports), str(KERNELS), "exec"), module.__dict__)  # noqa: S102
    return module.__dict__


def matmul_configs(triton):
    """Tutorial 03's CUDA configs (get_cuda_autotune_config)."""
    c = triton.Config
    return [
        c({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8}, num_stages=3, num_warps=8),
        c({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 256, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        c({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        c({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        c({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        c({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4, num_warps=4),
        c({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=5, num_warps=2),
        c({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=5, num_warps=2),
    ]


def with_tutorial_configs(ns: dict, triton) -> None:
    """The namespace's matmul kernel autotuned over the tutorial's configs instead of the tests' small ones."""
    base = ns["matmul_kernel"].fn
    ns["matmul_kernel"] = triton.autotune(configs=matmul_configs(triton), key=['M', 'N', 'K'])(base)


def softmax_rows(ns: dict, x: torch.Tensor) -> torch.Tensor:
    """Tutorial 02's kernel with a program per row (its wrapper's occupancy query reads driver internals)."""
    n_rows, n_cols = x.shape
    block = ns["triton"].next_power_of_2(n_cols)
    warps = 4 if block < 2048 else 8 if block < 4096 else 16
    y = torch.empty_like(x)
    ns["softmax_kernel"][(n_rows, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, block, 2, num_warps=warps)
    return y


def workloads(device: str, cpu_small: bool):
    """(name, size label, inputs, call(ns, *inputs), torch reference)."""
    big = not cpu_small
    gen = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)
    for n in ((98432, 1 << 24) if big else (98432, 1 << 22)):
        x, y = randn(n), randn(n)
        yield "vector_add", f"n={n}", (x, y), lambda ns, x, y: ns["add"](x, y), lambda x, y: x + y
    for n_cols in ((1024, 4096) if big else (1024,)):
        x = randn(4096 if big else 1024, n_cols)
        yield "softmax", f"4096x{n_cols}" if big else f"1024x{n_cols}", (x,), softmax_rows, \
            lambda x: torch.softmax(x, dim=-1)
    for n in ((1024, 4096) if big else (1024,)):
        dtype = torch.float16 if device == "cuda" else torch.float32
        x, w, b = randn(4096 if big else 1024, n, dtype=dtype), randn(n, dtype=dtype), randn(n, dtype=dtype)
        yield "layer_norm", f"{x.shape[0]}x{n} {str(dtype)[6:]}", (x, w, b), \
            lambda ns, x, w, b: ns["layer_norm"](x, w, b)[0], \
            lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    m = 4096 if big else 512
    a, b = randn(m, m, dtype=torch.float16), randn(m, m, dtype=torch.float16)
    yield "matmul", f"{m}^3 fp16", (a, b), lambda ns, a, b: ns["matmul"](a, b), lambda a, b: a @ b


def time_gpu(fn) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, return_mode="median") * 1e3   # microseconds


def time_cpu(fn, budget: float = 0.5) -> float:
    fn()
    runs, start = [], time.perf_counter()
    while time.perf_counter() - start < budget or len(runs) < 3:
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="babytriton on the CPU against torch eager")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    args = parser.parse_args()
    device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
    import babytriton.triton as bt_triton
    baby = load(BABY_IMPORTS)
    other = None
    if device == "cuda":
        import triton
        other = load(TRITON_IMPORTS)
        with_tutorial_configs(other, triton)
        with_tutorial_configs(baby, bt_triton)
    only = set(filter(None, args.only.split(",")))
    timer = time_gpu if device == "cuda" else time_cpu
    head = f"{'kernel':<12} {'size':<18} {'babytriton us':>14} {'Triton us' if other else 'torch us':>12} {'ratio':>7}"
    print(head + ("   torch us" if other else ""))
    for name, size, inputs, call, ref in workloads(device, device == "cpu"):
        if only and name not in only:
            continue
        try:
            got = call(baby, *inputs)
            want = call(other, *inputs) if other else ref(*inputs)
            tol = 2e-2 if got.dtype in (torch.float16, torch.bfloat16) else 1e-4
            if name == "matmul":   # fp32 accumulation of 4096 terms: compare relative to the output's scale
                tol = 1e-2 * float(want.float().abs().max())
            torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
            ours = timer(lambda: call(baby, *inputs))
            theirs = timer(lambda: call(other, *inputs)) if other else timer(lambda: ref(*inputs))
            line = f"{name:<12} {size:<18} {ours:>14.1f} {theirs:>12.1f} {theirs / ours:>7.2f}"
            if other:
                line += f" {timer(lambda: ref(*inputs)):>10.1f}"
            print(line, flush=True)
        except Exception as e:  # noqa: BLE001 - a row that fails says why and the rest still run
            print(f"{name:<12} {size:<18} fails: {type(e).__name__}: {str(e).splitlines()[0][:150]}", flush=True)


if __name__ == "__main__":
    main()
