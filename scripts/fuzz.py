"""Differential fuzzing of babytriton: random @jit programs, compiled and compared with their eager run.

    python scripts/fuzz.py --n 2000 --seed 0 --out fuzz_failures/

Each failing program is minimised and saved under --out as a runnable reproducer (check it with
`python -c "from babytriton.testing import fuzz; print(fuzz.check_file('FILE'))"`); keep the ones
that found bugs under tests/fuzz_regressions/. If the process dies (a segfault), the program it was
running is --out/_current.py.
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
    parser.add_argument("--no-minimise", action="store_true", help="save failing programs as generated")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    args = parser.parse_args()
    report = fuzz.run(args.n, args.seed, args.out, minimise_failures=not args.no_minimise,
                      log=None if args.quiet else print)
    print(f"{report.programs} programs in {report.seconds:.1f}s ({report.seconds / max(report.programs, 1):.3f}s "
          f"each): {len(report.failures)} failures, {len(report.invalid)} invalid programs (generator bugs)")
    for seed, outcome, path in report.failures:
        print(f"  seed {seed}: {outcome.kind}: {outcome.detail.splitlines()[0] if outcome.detail else ''} -> {path}")
    return 1 if report.failures or report.invalid else 0


if __name__ == "__main__":
    sys.exit(main())
