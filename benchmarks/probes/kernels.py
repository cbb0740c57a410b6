"""Where a generated program's time goes on the GPU: each CUDA kernel of one babytriton call and of one
torch.compile call (torch.profiler), for the performance fuzzer's programs below target.

    python benchmarks/probes/kernels.py p22,p116 [--seed 0]      # on the GPU machine
    python benchmarks/probes/kernels.py --below 0.85 --jsonl perf_gpu.jsonl   # the programs of a run below 0.85x
"""
import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch                                   # noqa: E402
from torch.profiler import ProfilerActivity, profile   # noqa: E402

import babytriton as bt                        # noqa: E402
import perf_programs                           # noqa: E402


def kernel_times(fn, args, calls: int = 5) -> list[tuple[str, float]]:
    """(kernel name, microseconds per call) of each CUDA kernel `fn(*args)` launches, slowest first."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    times = [(e.key, e.device_time_total / calls) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(times, key=lambda t: -t[1])


def load(source: str, folder: str):
    path = Path(folder) / f"program_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def show(name: str, seed: int, folder: str) -> None:
    index = int(name.lstrip("p"))
    program = perf_programs.generate(seed, index)
    args = perf_programs.make_args(program.args, "cuda", seed)
    f = load(program.module_text(), folder)
    jitted = bt.jit(target="gpu")(f)
    print(f"== {name}: {program.summary}")
    for k in jitted.compile(*args).fusion:
        print(f"   {k.rule:<28} {k.launch:<32} {k.name[:90]}")
    for label, fn in (("babytriton", jitted), ("torch.compile", torch.compile(f))):
        times = kernel_times(fn, args)
        print(f"   {label}: {sum(t for _, t in times):.1f} us of kernels")
        for kernel, t in times[:8]:
            print(f"      {t:9.1f} us  {kernel[:110]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="?", default="", help="comma-separated programs (p22,p116)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jsonl", help="a perf_fuzz --jsonl record: take its programs below --below")
    parser.add_argument("--below", type=float, default=0.85)
    parser.add_argument("--most", type=int, default=12, help="at most this many programs")
    opts = parser.parse_args()
    names = [n for n in opts.names.split(",") if n]
    if opts.jsonl:
        records = [json.loads(line) for line in open(opts.jsonl)]
        ratios = [(r["ratio"], r["name"]) for r in records if r.get("ratio") and r["ratio"] < opts.below]
        names += [n for _, n in sorted(ratios)]
    folder = tempfile.mkdtemp(prefix="kernels_")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/perf_fuzz_inductor")
    for name in names[:opts.most]:
        try:
            show(name, opts.seed, folder)
        except Exception as e:  # noqa: BLE001 - one program's failure is reported, the others go on
            print(f"== {name}: failed: {type(e).__name__}: {str(e)[:300]}")


if __name__ == "__main__":
    main()
