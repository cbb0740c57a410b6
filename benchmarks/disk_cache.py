"""A disk-cache hit in a fresh process: the first call of a small @jit function when another process
compiled it before, next to the cold first call that compiles and stores it.

Run: python benchmarks/disk_cache.py [runs]. Each measurement is a new Python process (imports not
counted in the call times; reported on their own line).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import json, sys, time
start = time.perf_counter()
import torch
import tvm
import babytriton as bt
from babytriton.runtime import cache
imported = time.perf_counter()

@bt.jit
def small(a: bt.Tensor((64, 64), "float32"), b: bt.Tensor((64, 64), "float32")):
    c = a + b
    d = c * a
    return d - 1.0

a, b = torch.randn(64, 64), torch.randn(64, 64)
result = {"import_s": imported - start}
if sys.argv[1] == "call":             # the first call: key, load (or compile and store), VM, run
    t0 = time.perf_counter()
    out = small(a, b)
    result["first_call_ms"] = (time.perf_counter() - t0) * 1e3
    torch.testing.assert_close(out, (a + b) * a - 1.0)
    result["info"] = small.cache_info()
else:                                 # the same steps one by one, in a process of their own
    t0 = time.perf_counter()
    key = cache.make_key(small, small._specs((a, b)), small.target())
    t1 = time.perf_counter()
    entry = cache.load(cache.entry_dir(small, key), key)
    t2 = time.perf_counter()
    vm = tvm.relax.VirtualMachine(entry.executable, tvm.cpu())["small"]
    t3 = time.perf_counter()
    result.update(key_ms=(t1 - t0) * 1e3, load_ms=(t2 - t1) * 1e3, vm_ms=(t3 - t2) * 1e3)
print(json.dumps(result))
'''


def child(script: Path, mode: str, env) -> dict:
    out = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(runs: int = 5):
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "BABYTRITON_CACHE_DIR": str(Path(folder) / "cache"), "PYTHONPATH": str(repo)}
        script = Path(folder) / "child.py"
        script.write_text(CHILD)
        cold = child(script, "call", env)
        assert cold["info"]["compilations"] == 1, cold
        warm = [child(script, "call", env) for _ in range(runs)]
        assert all(w["info"]["disk_hits"] == 1 and w["info"]["compilations"] == 0 for w in warm), warm
        parts = [child(script, "parts", env) for _ in range(runs)]
    def spread(name):
        values = sorted(w[name] for w in warm + parts if name in w)
        return f"median {values[len(values) // 2]:7.2f}  min {values[0]:7.2f}  max {values[-1]:7.2f}"
    print(f"cold first call (compile + store) : {cold['first_call_ms']:8.2f} ms")
    print(f"warm first call (disk hit)        : {spread('first_call_ms')} ms   over {runs} processes")
    print("  its steps, one by one in other processes:")
    print(f"    key (sources, globals, target): {spread('key_ms')} ms")
    print(f"    read, check, load the library : {spread('load_ms')} ms")
    print(f"    create the VM                 : {spread('vm_ms')} ms")
    print(f"interpreter imports (torch, tvm)  : {spread('import_s')} s  (not part of the above)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
