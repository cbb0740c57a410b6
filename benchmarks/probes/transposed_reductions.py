"""GPU probe for row computations read through a transpose (issue 28; perf-fuzz seed 0: p22, p91, p124,
p140, p179, p185): each program regenerated, built by babytriton, checked against torch eager, timed
against eager with CUDA events (median), its effective bandwidth (bytes of the inputs and results over
the time), and the CUDA time of each of babytriton's kernels (torch.profiler), with the rule that
scheduled it. torch.compile's ratios come from benchmarks/perf_fuzz.py --only ....

    python benchmarks/probes/transposed_reductions.py [p22,p91,...]     # < 1 minute on an H100
"""
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import babytriton as bt  # noqa: E402
import perf_programs  # noqa: E402
from timing import gpu_time  # noqa: E402 - benchmarks/probes/timing.py

NAMES = ["p22", "p91", "p124", "p140", "p179", "p185"]


def load(index: int, workdir: Path):
    """Program p<index> of seed 0: its function and its CUDA inputs."""
    program = perf_programs.generate(0, index)
    path = workdir / f"{program.name}.py"
    path.write_text(program.module_text())
    spec = importlib.util.spec_from_file_location(program.name, path)  # @jit reads f's source from its file
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return program, module.f, perf_programs.make_args(program.args, "cuda", 0)


def results(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def kernel_times(fn, args) -> dict:
    """CUDA microseconds per call of each kernel that one call of `fn` launches."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / 5 for e in prof.key_averages() if e.device_time_total > 0}


def probe(name: str, workdir: Path) -> None:
    program, f, args = load(int(name[1:]), workdir)
    k = bt.jit(f, target="gpu")
    got, want = results(k(*args)), results(f(*args))
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.shape != w.shape:
            print(f"{name}: result {i} is {g.dtype} {list(g.shape)}, torch's {w.dtype} {list(w.shape)}")
            continue
        tol = 1e-3 if w.dtype == torch.float32 else 1.0 if not w.is_floating_point() else 3e-2  # int8: one step
        close = torch.isclose(g.double(), w.double(), rtol=tol, atol=tol, equal_nan=True)
        if not close.all():
            print(f"{name}: result {i} differs from torch at {int((~close).sum())} of {w.numel()} elements")
    ours, eager = gpu_time(k, args) / 1000, gpu_time(f, args) / 1000
    moved = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)) + sum(
        w.numel() * w.element_size() for w in want)
    print(f"\n{name}: {program.summary}\n  babytriton {ours * 1e3:.1f} us ({moved / ours / 1e6:.0f} GB/s of inputs+results)"
          f"  eager {eager * 1e3:.1f} us  eager/ours {eager / ours:.2f}x")
    rules = {c: kern.rule + ": " + kern.launch for kern in k.compile(*args).fusion for c in kern.cuda_kernels}
    for kernel, us in sorted(kernel_times(k, args).items(), key=lambda kv: -kv[1]):
        rule = next((r for c, r in rules.items() if kernel.startswith(c)), "")
        print(f"    {us:9.1f} us  {kernel[:90]}  {rule}")


def main() -> None:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else NAMES
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                probe(name, Path(tmp))
            except Exception as e:  # report and go on: one program's failure says nothing of the others
                print(f"\n{name}: FAILED {type(e).__name__}: {str(e)[:500]}")


if __name__ == "__main__":
    main()
