"""Run perf-fuzzer programs once on the GPU and print the whole chain of any error (the fuzzer's table
keeps one line): `python benchmarks/probes/run_failing.py p76 p154` (seed 0, default sizes)."""
import sys
import tempfile
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import perf_programs  # noqa: E402
import babytriton as bt  # noqa: E402


def main(names):
    workdir = Path(tempfile.mkdtemp())
    wanted = {int(n.lstrip("p")) for n in names}
    for index in sorted(wanted):
        program = perf_programs.generate(0, index)
        path = workdir / f"{program.name}.py"
        path.write_text(program.module_text())
        namespace = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        args = [a.make("cuda", 1) for a in program.args]
        print(f"== {program.name}: {program.summary}")
        f = bt.jit(namespace["f"], target="gpu")
        try:
            print("kernels:\n" + str(f.compile(*args).fusion))
            got, want = f(*args), namespace["f"](*args)
            torch.cuda.synchronize()
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                print("greatest difference", (g.float() - w.float()).abs().nan_to_num(0).max().item())
        except Exception as e:  # noqa: BLE001
            traceback.print_exception(e)


if __name__ == "__main__":
    main(sys.argv[1:])
