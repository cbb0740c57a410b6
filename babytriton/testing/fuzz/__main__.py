"""`python -m babytriton.testing.fuzz N SEED` (scripts/fuzz.py has the options); `--worker`: a child of run_isolated."""
import os
import sys

from .driver import _worker, run

if sys.argv[1:2] == ["--worker"]:
    _worker(sys.argv[2:])
else:
    result = run(int(sys.argv[1]) if len(sys.argv) > 1 else 50, int(sys.argv[2]) if len(sys.argv) > 2 else 0,
                 os.environ.get("BT_FUZZ_OUT"), log=print)
    print(result.summary())
