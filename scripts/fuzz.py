"""Differential fuzzing of babytriton: random @jit programs, each compared with plain torch.

    python scripts/fuzz.py --n 2000 --seed 0 --out fuzz_failures/ [--threads 8] [--isolate] [--cuda] [--jobs 16]

Each program runs translated into plain torch (the oracle), compiled, and eagerly (a second opinion);
with --threads, also from that many threads at once. Each failing program is minimised and saved
under --out as a runnable reproducer (check it with
`python -c "from babytriton.testing import fuzz; print(fuzz.check_file('FILE'))"`); keep the ones
that found bugs under tests/testing/fuzz_regressions/ once fixed. --isolate runs the programs in a child
process, so one that kills it (a segfault) is reported as a "fatal" finding and the run goes on;
without it, the program a dead process was running is --out/_current.py. --cuda also builds every
program that passes for CUDA (sm_90) and compiles its CUDA source with nvcc (no GPU needed). --jobs J
checks the programs in J worker processes at once (isolated; reproducers under --out/jobJ/).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from babytriton.testing import fuzz  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="how many programs (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed: the same seed, the same programs")
    parser.add_argument("--out", default="fuzz_failures", help="where reproducers go (default fuzz_failures/)")
    parser.add_argument("--threads", type=int, default=0,
                        help="also call each compiled program from this many threads at once (3 calls each)")
    parser.add_argument("--isolate", action="store_true",
                        help="run in a child process; a program that kills it is a finding, the run goes on")
    parser.add_argument("--minimise", type=int, default=fuzz.MINIMISE_PER_SORT,
                        help="how many failures of each sort (kind, category) to minimise; 0: none "
                             f"(default {fuzz.MINIMISE_PER_SORT}); the others are saved as generated")
    parser.add_argument("--cuda", action="store_true",
                        help="also build each program for CUDA (sm_90) and compile its source with nvcc")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes checking programs at once")
    parser.add_argument("--first", type=int, default=0,
                        help="start at this program of the seed's sequence (to go on with a run; with --isolate)")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    args = parser.parse_args()
    log = None if args.quiet else print
    if args.jobs > 1:
        report = fuzz.run_parallel(args.n, args.seed, args.out, args.jobs, minimise_failures=args.minimise,
                                   log=log, threads=args.threads, cuda=args.cuda)
    else:
        runner = fuzz.run_isolated if args.isolate else fuzz.run
        report = runner(args.n, args.seed, args.out, minimise_failures=args.minimise, log=log,
                        threads=args.threads, cuda=args.cuda, first=args.first)
    print(report.summary())
    return 1 if report.failures or report.invalid else 0


if __name__ == "__main__":
    sys.exit(main())
