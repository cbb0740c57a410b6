"""GPU probe for issue 28 item 3 (a producer into softmax / log_softmax, babytriton/passes/decompose.py): the
outside set's softmax programs at full size, compiled with babytriton as now ("decomposed") and with
decompose.DECOMPOSE and rowwise.RECOMPUTE_PRODUCERS off ("before": the library op one opaque kernel,
smaller producers kernels of their own), each checked against torch eager, timed against eager and
torch.compile. Run: python benchmarks/probes/softmax_fusion.py [--no-inductor] (about 40 s on an H100, most of it
torch.compile's)
Prints one line per program and variant: kernels, max error, microseconds, then the kernels and rules."""
import sys
import time
from pathlib import Path

import torch

import babytriton as bt
from babytriton.passes import decompose, rowwise

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import outside  # noqa: E402
from perf_programs import make_args  # noqa: E402

NAMES = ("softcap_softmax", "masked_softmax", "kl_divergence", "label_smoothed_cross_entropy", "alibi_attention")
INDUCTOR = "--no-inductor" not in sys.argv


def timed(fn, args, reps=30) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def error(got, want) -> float:
    """The largest difference; inf where one has a NaN and the other not (an all-masked row is NaN)."""
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))

    def one(g, w):
        if not g.numel():
            return 0.0
        if not torch.equal(g.isnan(), w.isnan()):
            return float("inf")
        return float((g.double() - w.double()).nan_to_num(0.0).abs().max())
    return max(one(g, w) for g, w in zip(got, want))


def compiled(fn, args, decomposed: bool):
    """babytriton's version of fn with the two switches on or off (no disk cache: they are no key)."""
    decompose.DECOMPOSE = rowwise.RECOMPUTE_PRODUCERS = decomposed
    try:
        f = bt.jit(fn, target="gpu", cache=False)
        return f, f.compile(*args)
    finally:
        decompose.DECOMPOSE = rowwise.RECOMPUTE_PRODUCERS = True


def main():
    for name in NAMES:
        program = outside.by_name(name)
        args = make_args(list(program.full), "cuda", 0)
        want = program.fn(*args)
        eager = timed(program.fn, args)
        inductor = timed(torch.compile(program.fn), args) if INDUCTOR else float("nan")
        print(f"{name}: eager {eager:8.1f} us  inductor {inductor:8.1f} us", flush=True)
        for decomposed in (True, False):
            label = "decomposed" if decomposed else "before    "
            try:
                f, k = compiled(program.fn, args, decomposed)
                err, ours = error(f(*args), want), timed(f, args)
                kernels = "; ".join(f"{kern.name[:44]} {kern.rule} [{kern.launch}]" for kern in k.fusion)
                print(f"  {label} {len(k.fusion)} kernels  err {err:.2e}  bt {ours:8.1f} us  "
                      f"eager/bt {eager / ours:5.2f}  inductor/bt {inductor / ours:5.2f}  | {kernels}", flush=True)
            except Exception as e:  # noqa: BLE001 - a probe: report and go on
                print(f"  {label} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)


if __name__ == "__main__":
    main()
