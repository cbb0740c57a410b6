"""The performance fuzzer: generated PyTorch programs, timed with babytriton against torch.compile and eager.

    python benchmarks/perf_fuzz.py --device gpu --n 200 --max-seconds 480 --markdown out.md
    python benchmarks/perf_fuzz.py --device cpu --threads 16 --n 200 --max-seconds 480 --markdown out.md
    python benchmarks/perf_fuzz.py --device gpu --set outside            # the issue's 28 programs
    python benchmarks/perf_fuzz.py --device cpu --n 5 --small --jobs 0 --threads 1   # a quick run on any machine
    python benchmarks/perf_fuzz.py --device gpu --build-only --n 200     # no GPU needed: each kernel's
                                                                         # strategy when built for sm_90

The programs come from perf_programs.generate (`--set generated`, `--seed`, `--n`, sizes 2^16-2^26
elements, `--log2 LO:HI`) or outside.py (`--set outside`); `--small` makes them tiny. Each is a file
of plain PyTorch. For each, in one process: its inputs are made on the device; torch runs it eagerly
(the reference: a program torch refuses is skipped and counted); babytriton compiles it
(`bt.jit(f, target=...)`) and its results are compared with torch's (where they differ, with
torch.compile's too, since both keep float32 inside a fused kernel where eager rounds each op:
only a result neither accepts is a mismatch); torch.compile compiles it; then babytriton, eager and
torch.compile are timed on the same inputs with bench.time_call, and every babytriton kernel's rule,
launch shape and work (elements of the largest buffer it reads or writes) is recorded from
`k.fusion`. Ops the VM runs with no kernel of ours (`R.cumsum`) are listed as such.

Compiling dominates: before timing, `--jobs` worker processes compile every program (babytriton
into its disk cache, babytriton/runtime/cache.py; torch.compile into Inductor's FX-graph and kernel caches
under TORCHINDUCTOR_CACHE_DIR, shared), so the timing process's compiles are cache hits. A worker
that dies on a program, or takes over `--compile-timeout` seconds, is replaced (the program counts
as a crash and is not timed). `--max-seconds` stops the warm-up at 60% of the time and the timing at
100%, and reports what finished.

The report: the distribution of ratios torch.compile time / babytriton time (> 1: babytriton is
faster; `--no-compile`: against eager), p10 ... p90, geometric mean, the minimum with its program;
counts of build failures, mismatches and torch errors; kernels above 2^16 elements of work left on
Fallback (GPU: dlight.gpu.Fallback; CPU: no rule, or a serial loop); ratios by program feature; and
for every program below `--below` (default: the issue's 10th-percentile target) each kernel's
strategy. `--markdown FILE` appends it for benchmarks/RESULTS.md; `--jsonl FILE` writes a record per
program.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(HERE), HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)
# Shared by the workers and the timing process (their caches must be one); set before torch reads them.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "babytriton_perf_fuzz_inductor"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool per process: the workers are the pool

import torch  # noqa: E402

import babytriton as bt  # noqa: E402
import outside  # noqa: E402
import perf_programs  # noqa: E402
from babytriton.core import config  # noqa: E402
from babytriton.testing.fuzz import load  # noqa: E402
from bench import fmt_time, reason, time_call  # noqa: E402
from perf_programs import Arg, make_args  # noqa: E402

TARGETS = {"gpu": {"median": 1.1, "p10": 0.85}, "cpu": {"median": 1.1, "p10": 0.7}}
FALLBACK_WORK = 1 << 16    # a kernel above this many elements of work should not be on Fallback
TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 5e-2}
INDEX_MISMATCH_SHARE = 1e-3  # argmax over values computed in another order: ties may pick another index
MARK = "@@perf "
KERNEL_CALLS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")
VIEWS = ("reshape", "shape_of", "tensor_to_shape", "null_value", "match_cast", "ensure_zero_offset")  # VM ops moving no data


# --------------------------------------------------------------------------------------------------
# the programs
# --------------------------------------------------------------------------------------------------

@dataclass
class Entry:
    """A program to run: its inputs' specs and where its function lives (a generated file, or outside.py)."""
    name: str
    args: list[Arg]
    tags: tuple
    summary: str
    elements: int          # the program's size: elements of the tensor it starts from
    path: str | None = None

    def function(self):
        return load(self.path).f if self.path else outside.by_name(self.name).fn


def entries(opts, workdir: Path) -> list[Entry]:
    """The run's programs, the same in every process (generated files are written once, by the parent)."""
    if opts.set == "outside":
        out = []
        for p in outside.PROGRAMS:
            args = list(p.small if opts.small else p.full)
            out.append(Entry(p.name, args, p.tags, shapes(args), max(a.numel for a in args)))
    else:
        log2 = perf_programs.SMALL_LOG2 if opts.small else tuple(int(v) for v in opts.log2.split(":"))
        out = []
        for index in range(opts.n):
            program = perf_programs.generate(opts.seed, index, log2)
            path = workdir / f"{program.name}_seed{opts.seed}.py"
            text = program.module_text()
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
            out.append(Entry(program.name, program.args, program.tags, program.summary, program.size, str(path)))
    names = [n for n in (opts.only or "").split(",") if n]
    return [e for e in out if not names or e.name in names]


def shapes(args) -> str:
    return " ".join(f"{a.name}{list(a.passed_shape)}:{perf_programs.short(a.dtype)}" for a in args)


def target_of(device: str) -> str:
    return "gpu" if device == "gpu" else "cpu"


def torch_device(device: str) -> str:
    return "cuda" if device == "gpu" else "cpu"


# --------------------------------------------------------------------------------------------------
# calling and comparing
# --------------------------------------------------------------------------------------------------

def fresh(args: tuple) -> tuple:
    """Copies with the same strides: a program that updates an argument in place updates its copy."""
    return tuple(torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device).copy_(a)
                 if isinstance(a, torch.Tensor) else a for a in args)


def call(fn, args: tuple) -> tuple:
    """The results of one call on fresh copies, then the copies (updated in place, maybe)."""
    copies = fresh(args)
    out = fn(*copies)
    out = () if out is None else out if isinstance(out, tuple) else (out,)
    return tuple(out) + copies


def mismatch(got: tuple, expected: tuple) -> str | None:
    """Why babytriton's results (then the arguments after the call) differ from the reference's, or None."""
    if len(got) != len(expected):
        return f"{len(got)} results, torch gives {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        problem = differs(g, e)
        if problem:
            return f"result {i}: {problem}"
    return None


def differs(g, e) -> str | None:
    """Why one result differs from torch's: dtype, shape, values beyond the dtype's tolerance (relative to
    the result's scale), int8 by more than 1, indices in more than INDEX_MISMATCH_SHARE of places."""
    if not isinstance(e, torch.Tensor):
        return None if g == e or (isinstance(e, float) and math.isclose(g, e, rel_tol=1e-3)) else f"{g} != {e}"
    if not isinstance(g, torch.Tensor) or g.dtype != e.dtype or g.shape != e.shape:
        return f"{describe(g)} where torch gives {describe(e)}"
    if e.dtype == torch.bool or e.numel() == 0:
        return None if torch.equal(g, e) else "bool values differ"
    if not e.is_floating_point():
        wrong = (g.long() - e.long()).abs() > (1 if e.dtype == torch.int8 else 0)  # int8: round() at a .5 boundary
        if e.dtype == torch.int8 or wrong.float().mean().item() > INDEX_MISMATCH_SHARE:
            return None if not wrong.any() else f"{int(wrong.sum())} of {e.numel()} integers differ"
        return None
    tol = TOLERANCE.get(e.dtype, 1e-3)
    finite = e[torch.isfinite(e)].float()
    scale = max(1.0, finite.pow(2).mean().sqrt().item()) if finite.numel() else 1.0
    if torch.allclose(g.float(), e.float(), rtol=tol, atol=tol * scale, equal_nan=True):
        return None
    worst = ((g.float() - e.float()).abs().nan_to_num(float("inf"))).max().item()
    return f"greatest difference {worst:.3g} (scale {scale:.3g}, tolerance {tol:g})"


@contextlib.contextmanager
def tvm_causes():
    """BABYTRITON_DEBUG=1 while compiling: a failure's message then says what TVM said (bench.reason)."""
    before = os.environ.get("BABYTRITON_DEBUG")
    os.environ["BABYTRITON_DEBUG"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["BABYTRITON_DEBUG"]
        else:
            os.environ["BABYTRITON_DEBUG"] = before


def describe(v) -> str:
    return f"{v.dtype} {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__


# --------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------

def kernels_of(k) -> list[dict]:
    """Each kernel of a compiled function: name, rule, launch shape, work (elements), ops; and each op
    the VM runs with no kernel of ours."""
    import tvm
    module = k.module
    work = {gv.name_hint: largest_buffer(fn) for gv, fn in module.functions_items() if isinstance(fn, tvm.tirx.PrimFunc)}
    out = [{"name": e.name, "rule": e.rule or "none", "launch": e.launch, "work": work.get(e.name),
            "ops": [op.op for op in e.ops]} for e in k.fusion]
    return out + vm_ops(module)


def largest_buffer(func) -> int:
    """Elements of the largest buffer a PrimFunc reads or writes (static sizes; 0 where symbolic)."""
    best = 0
    for param in func.params:
        shape = getattr(getattr(param, "ty", None), "shape", None)
        if shape is None:
            continue
        try:
            best = max(best, math.prod(int(d) for d in shape))
        except TypeError:
            continue
    return best


def vm_ops(module) -> list[dict]:
    """Relax ops left in the compiled functions that are no kernel (`R.cumsum` runs in the VM's library)."""
    import tvm
    from tvm import relax

    from babytriton.runtime import fusion
    out = []
    for _, fn in fusion.user_functions(module):
        for binding in fusion.bindings(fn):
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op) or value.op.name in KERNEL_CALLS:
                continue
            name = value.op.name.removeprefix("relax.")
            if name == "call_pure_packed":  # a VM builtin or a library function, by name
                name = getattr(value.args[0], "global_symbol", name)
            if any(view in name for view in VIEWS):
                continue
            shape = getattr(binding.var.ty, "shape", None)
            try:
                work = math.prod(int(d) for d in shape.values)
            except (TypeError, AttributeError):  # not a tensor of static shape
                work = None
            out.append({"name": name, "rule": f"no kernel (VM op {name})", "launch": "", "work": work, "ops": [name]})
    return out


def on_fallback(kernel: dict, device: str) -> bool:
    """A kernel no strategy took: Dlight's Fallback on a GPU; no rule, or a serial loop, on a CPU."""
    if device == "gpu":
        return "Fallback" in kernel["rule"]
    return kernel["rule"] in ("none", "") or kernel["launch"].startswith("serial")


def strategy(kernel: dict) -> str:
    work = f", {kernel['work']:,} elements" if kernel.get("work") else ""
    launch = f" {kernel['launch']}" if kernel["launch"] else ""
    return f"{kernel['rule']}{launch}{work}"


# --------------------------------------------------------------------------------------------------
# one program: warm (a worker) and measure (the timing process)
# --------------------------------------------------------------------------------------------------

def warm(entry: Entry, opts) -> dict:
    """Compile with babytriton and torch.compile once, filling the disk caches; what each said.
    (--build-only: the program's record, its kernels built for the target.)"""
    if opts.build_only:
        return build(entry, opts)
    out = {"name": entry.name}
    args = make_args(entry.args, torch_device(opts.device), 1)
    fn = entry.function()
    start = time.perf_counter()
    try:
        with tvm_causes():
            bt.jit(fn, target=target_of(opts.device)).compile(*args)
        out["bt"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported by the timing process too
        out["bt"] = reason(e)
    out["bt_seconds"] = time.perf_counter() - start
    if not opts.no_compile:
        start = time.perf_counter()
        try:
            call(torch.compile(fn), args)
            out["compile"] = "ok"
        except Exception as e:  # noqa: BLE001
            out["compile"] = reason(e)
        out["compile_seconds"] = time.perf_counter() - start
    return out


def build(entry: Entry, opts) -> dict:
    """--build-only: compile for the target with meta tensors (no GPU needed) and record the kernels."""
    rec = new_record(entry)
    args = tuple(a.meta() for a in entry.args)
    start = time.perf_counter()
    try:
        with tvm_causes():
            rec["kernels"] = kernels_of(bt.jit(entry.function(), target=target_of(opts.device)).compile(*args))
    except Exception as e:  # noqa: BLE001
        rec["fails"] = reason(e)
    rec["bt_seconds"] = time.perf_counter() - start
    return rec


def new_record(entry: Entry) -> dict:
    return {"name": entry.name, "summary": entry.summary, "tags": list(entry.tags), "elements": entry.elements}


def measure(entry: Entry, opts) -> dict:
    """Check babytriton against torch on one program and time it, eager and torch.compile."""
    if opts.build_only:
        return build(entry, opts)
    gpu = opts.device == "gpu"
    rec = new_record(entry)
    args = make_args(entry.args, torch_device(opts.device), 1)
    fn = entry.function()
    try:
        expected = call(fn, args)
    except Exception as e:  # noqa: BLE001 - torch refuses the program: not babytriton's to run
        rec["torch error"] = reason(e)
        return rec
    start = time.perf_counter()
    try:
        f = bt.jit(fn, target=target_of(opts.device))
        with tvm_causes():
            got = call(f, args)
        rec["kernels"] = kernels_of(f.compile(*args))
    except Exception as e:  # noqa: BLE001
        rec["fails"] = reason(e)
    rec["bt compile seconds"] = time.perf_counter() - start
    compiled = compiled_out = None
    if not opts.no_compile:
        start = time.perf_counter()
        try:
            compiled = torch.compile(fn)
            compiled_out = call(compiled, args)
        except Exception as e:  # noqa: BLE001
            rec["compile fails"] = reason(e)
            compiled = None
        rec["torch.compile seconds"] = time.perf_counter() - start
    if "fails" in rec:
        return rec
    problem = mismatch(got, expected)
    if problem and compiled_out is not None and mismatch(got, compiled_out) is None:
        problem = None  # torch.compile computes it as babytriton does (float32 inside one kernel)
    if problem:
        rec["mismatch"] = problem
    timing = {"budget_s": opts.budget, "repeats": opts.repeats}
    rec["babytriton"] = time_call(f, args, gpu, **timing)
    rec["eager"] = time_call(fn, args, gpu, **timing)
    if compiled is not None:
        rec["torch.compile"] = time_call(compiled, args, gpu, **timing)
    baseline = rec.get("eager" if opts.no_compile else "torch.compile")
    if baseline:
        rec["ratio"] = baseline / rec["babytriton"]
    return rec


# --------------------------------------------------------------------------------------------------
# the worker pool
# --------------------------------------------------------------------------------------------------

class Pool:
    """`jobs` worker processes (perf_fuzz.py --worker) compiling programs that they read, one name a
    line, from a queue shared by all; a worker that dies on a program is replaced (the program is a
    crash). Results by program name."""

    def __init__(self, argv: list[str], jobs: int, workdir: Path, timeout: float):
        self.argv, self.jobs, self.workdir, self.timeout = argv, jobs, workdir, timeout
        self.results: dict[str, dict] = {}
        self.queue: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.stopping = False
        self.lock = threading.Lock()

    def run(self, names: list[str], deadline: float) -> dict[str, dict]:
        """Compile `names` on the workers until done or `deadline` (then the workers are killed)."""
        self.queue = list(reversed(names))
        threads = [threading.Thread(target=self.feed, args=(i,), daemon=True) for i in range(min(self.jobs, len(names)))]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join(None if deadline == float("inf") else max(0.0, deadline - time.time()))
        finally:
            self.stop()
        for t in threads:
            t.join(10)
        return self.results

    def stop(self) -> None:
        """Kill the workers still running (only those this pool started)."""
        with self.lock:
            self.stopping = True
            for proc in self.procs:
                if proc.poll() is None:
                    proc.kill()

    def next_name(self) -> str | None:
        with self.lock:
            return self.queue.pop() if self.queue and not self.stopping else None

    def start(self, log) -> subprocess.Popen | None:
        """A new worker process (None once the pool is stopping)."""
        with self.lock:
            if self.stopping:
                return None
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *self.argv, "--worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log, text=True)
            self.procs.append(proc)
            return proc

    def feed(self, index: int) -> None:
        """One worker's loop: hand it a name, wait for its result; replace it where it dies."""
        log_path = self.workdir / f"worker{index}.log"
        with open(log_path, "a") as log:
            proc, name = None, self.next_name()
            while name is not None:
                proc = proc or self.start(log)
                if proc is None:
                    return
                fired = []
                timer = threading.Timer(self.timeout, lambda p=proc: fired.append(p.kill()))
                timer.start()
                result = self.ask(proc, name)
                timer.cancel()
                if result is None:  # died on it, or was killed for taking too long
                    if self.stopping:
                        return
                    code = proc.wait()
                    why = f"compiling took over {self.timeout:.0f} s" if fired else f"worker died ({signal_name(code)})"
                    result = {"name": name, "crash": f"{why}; log {log_path}"}
                    proc = None
                self.results[name] = result
                name = self.next_name()
            if proc is not None:
                proc.stdin.close()
                proc.wait()

    @staticmethod
    def ask(proc: subprocess.Popen, name: str) -> dict | None:
        """The worker's answer for one program; None where it died first."""
        try:
            proc.stdin.write(name + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        for line in proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        return None


def signal_name(code: int) -> str:
    if code < 0 and -code in signal.Signals._value2member_map_:
        return signal.Signals(-code).name
    return f"exit {code}"


def worker(opts, workdir: Path) -> None:
    """The worker's loop: warm each program named on stdin, answering on stdout."""
    by_name = {e.name: e for e in entries(opts, workdir)}
    kill_at = os.environ.get("PERF_FUZZ_KILL_AT")  # testing the pool: die on this program as a segfault would
    for line in sys.stdin:
        if line.strip() == kill_at:
            os.kill(os.getpid(), signal.SIGSEGV)
        print(MARK + json.dumps(warm(by_name[line.strip()], opts)), flush=True)


# --------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of values, linearly interpolated between ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def distribution(rows: list[tuple[float, str]]) -> list[str]:
    """p10, p25, median, p75, p90, geometric mean and the minimum (with its program) of (ratio, name)."""
    ratios = [r for r, _ in rows]
    cells = [f"{percentile(ratios, q):.2f}x" for q in (10, 25, 50, 75, 90)]
    cells.append(f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")
    low = min(rows)
    return cells + [f"{low[0]:.2f}x ({low[1]})"]


def ratio_rows(records: list[dict], tag: str | None = None) -> list[tuple[float, str]]:
    return [(r["ratio"], r["name"]) for r in records
            if "ratio" in r and "mismatch" not in r and (tag is None or tag in r["tags"])]




def headline(records: list[dict], opts, baseline: str) -> list[str]:
    """The distribution of ratios over every program that ran and matched, and the targets met or missed."""
    rows = ratio_rows(records)
    lines = [f"| {baseline} / babytriton | programs | p10 | p25 | median | p75 | p90 | geomean | min |",
             "|---|---|---|---|---|---|---|---|---|"]
    if rows:
        lines.append(f"| all | {len(rows)} | " + " | ".join(distribution(rows)) + " |")
    if rows and not opts.no_compile:
        target = TARGETS[opts.device]
        median, p10 = percentile([r for r, _ in rows], 50), percentile([r for r, _ in rows], 10)
        lines += ["", f"Targets ({opts.device}): median ≥ {target['median']}x: {'met' if median >= target['median'] else 'missed'} "
                  f"({median:.2f}x); 10th percentile ≥ {target['p10']}x: {'met' if p10 >= target['p10'] else 'missed'} ({p10:.2f}x)."]
    return lines


def counts(records: list[dict], total: int, pool: dict) -> str:
    """How many programs did what."""
    def n(key):
        return sum(key in r for r in records)
    crashed = [name for name, w in pool.items() if "crash" in w]
    built = sum("kernels" in r for r in records)
    parts = [f"{total} programs", f"timed {n('babytriton')}" if n("babytriton") or not built else f"built {built}",
             f"babytriton build failures {n('fails')}",
             f"mismatches {n('mismatch')} (left out of the ratios)", f"torch errors (skipped) {n('torch error')}",
             f"torch.compile failures {n('compile fails')}", f"worker crashes {len(crashed)}",
             f"not reached (time) {total - len(records) - len(crashed)}"]
    return "; ".join(parts) + "."


def kernel_lines(records: list[dict], device: str) -> list[str]:
    """Kernels by rule, and every kernel above FALLBACK_WORK elements on Fallback."""
    rules: dict[str, int] = {}
    fallback, vm = [], []
    for r in records:
        for k in r.get("kernels", []):
            rules[k["rule"]] = rules.get(k["rule"], 0) + 1
            where = vm if k["rule"].startswith("no kernel") else fallback if on_fallback(k, device) else None
            if where is not None and (k["work"] or 0) > FALLBACK_WORK:
                where.append(f"{r['name']} `{k['name']}` ({strategy(k)})")
    total = sum(rules.values())
    by_rule = ", ".join(f"{rule} {count}" for rule, count in sorted(rules.items(), key=lambda kv: -kv[1]))
    return [f"Kernels: {total} ({by_rule}).",
            f"On Fallback with more than 2^16 elements of work: {len(fallback)}" + (": " + "; ".join(fallback) if fallback else "."),
            f"Ops the VM runs with no kernel of ours, more than 2^16 elements: {len(vm)}" + (": " + "; ".join(vm) if vm else ".")]


def feature_table(records: list[dict]) -> list[str]:
    """Ratios by program feature (a generated program's tags: dtype, part, axis kind)."""
    tags = sorted({t for r in records for t in r["tags"]})
    lines = ["| feature | programs | geomean | p10 | min |", "|---|---|---|---|---|"]
    for tag in tags:
        rows = ratio_rows(records, tag)
        if rows:
            cells = distribution(rows)
            lines.append(f"| {tag} | {len(rows)} | {cells[5]} | {cells[0]} | {cells[6]} |")
    return lines


def below_table(records: list[dict], below: float) -> list[str]:
    """Every program below `below`, and the strategy of each of its kernels."""
    slow = sorted((r for r in records if r.get("ratio", below) < below and "mismatch" not in r), key=lambda r: r["ratio"])
    lines = [f"Programs below {below}x: {len(slow)}", "",
             "| program | ratio | babytriton | baseline | kernel | strategy | ops |", "|---|---|---|---|---|---|---|"]
    for r in slow:
        base = r.get("torch.compile", r["eager"])
        for i, k in enumerate(r.get("kernels", [])):
            head = (f"{r['name']} ({cell(r['summary'])}) | {r['ratio']:.2f}x | {fmt_time(r['babytriton'])} | {fmt_time(base)}"
                    if i == 0 else " | | | ")
            lines.append(f"| {head} | `{k['name']}` | {strategy(k)} | {' '.join(k['ops'])} |")
    return lines if slow else lines[:1]


def failure_table(records: list[dict], pool: dict) -> list[str]:
    rows = [(r["name"], kind, r[kind]) for r in records for kind in ("fails", "mismatch", "compile fails", "torch error") if kind in r]
    rows += [(name, "crash", w["crash"]) for name, w in pool.items() if "crash" in w]
    if not rows:
        return []
    return ["| program | what | why |", "|---|---|---|"] + [f"| {n} | {k} | {cell(w)} |" for n, k, w in rows]


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def report(records: list[dict], opts, total: int, pool: dict, header: str) -> str:
    """The whole report, as markdown."""
    baseline = "eager" if opts.no_compile else "torch.compile"
    below = opts.below if opts.below is not None else TARGETS[opts.device]["p10"]
    parts = [header, "", counts(records, total, pool), ""]
    if not opts.build_only:
        parts += [*headline(records, opts, baseline), ""]
    parts += kernel_lines(records, opts.device)
    if not opts.build_only:
        parts += ["", *feature_table(records), "", *below_table(records, below)]
    failures = failure_table(records, pool)
    if failures:
        parts += ["", "Failures", "", *failures]
    return "\n".join(parts) + "\n"


def progress_line(i: int, total: int, r: dict) -> str:
    """One line per program while the run goes: its ratio, times and kernels' rules, or what went wrong."""
    head = f"[{i + 1:>4}/{total}] {r['name']:<28}"
    for key in ("torch error", "fails", "crash"):
        if key in r:
            return f"{head} {key}: {r[key]}"
    if "babytriton" not in r:
        return f"{head} built: [{', '.join(k['rule'] for k in r.get('kernels', []))}]  {r['summary']}"
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "  -  "
    times = "  ".join(f"{k} {fmt_time(r[k])}" for k in ("babytriton", "torch.compile", "eager") if k in r)
    rules = ", ".join(k["rule"] for k in r.get("kernels", []))
    flag = f"  MISMATCH: {r['mismatch']}" if "mismatch" in r else ""
    return f"{head} {ratio:>7}  {times}  [{rules}]  {r['summary']}{flag}"


# --------------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------------

def parse(argv: list[str]):
    """The options, with the device's defaults filled in."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu" if torch.cuda.is_available() else "cpu")
    p.add_argument("--set", choices=("generated", "outside"), default="generated", help="generated programs or outside.py's")
    p.add_argument("--n", type=int, default=200, help="generated programs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log2", default=f"{perf_programs.LOG2[0]}:{perf_programs.LOG2[1]}", help="sizes: 2^LO..2^HI input elements")
    p.add_argument("--small", action="store_true", help="tiny sizes (quick runs, CI)")
    p.add_argument("--only", help="comma-separated program names (p17, group_norm)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile: ratios against eager")
    p.add_argument("--build-only", action="store_true", help="only compile (meta tensors: --device gpu builds for "
                   "sm_90 on a machine without one) and report the kernels' strategies")
    p.add_argument("--threads", type=int, help="torch's CPU threads (babytriton's CPU kernels run on them too)")
    p.add_argument("--jobs", type=int, help="compiling worker processes (0: none; default: one a core up to 16, "
                   "none with --small, whose compiles are quicker than starting a worker)")
    p.add_argument("--budget", type=float, help="seconds of timing per measurement (default: GPU 0.05, CPU 0.1)")
    p.add_argument("--repeats", type=int, help="timed batches per measurement (default: GPU 5, CPU 3)")
    p.add_argument("--compile-timeout", type=float, default=180, help="seconds a worker may take over one program "
                   "before it is killed (the program is then a crash, not timed)")
    p.add_argument("--max-seconds", type=float, help="stop (warm-up at 60%% of it, timing at 100%%) and report what finished")
    p.add_argument("--below", type=float, help="list programs below this ratio (default: the 10th-percentile target)")
    p.add_argument("--workdir", help="where the program files go (default: a new temporary folder)")
    p.add_argument("--markdown", help="append the report to this file")
    p.add_argument("--jsonl", help="write one JSON record per program to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    gpu = opts.device == "gpu"
    opts.budget = opts.budget or (0.05 if gpu else 0.1)
    opts.repeats = opts.repeats or (5 if gpu else 3)
    if opts.jobs is None:
        opts.jobs = 0 if opts.small else min(16, os.cpu_count() or 1)
    return opts


def worker_argv(opts, workdir: Path) -> list[str]:
    argv = ["--device", opts.device, "--set", opts.set, "--n", str(opts.n), "--seed", str(opts.seed),
            "--log2", opts.log2, "--workdir", str(workdir)]
    argv += ["--small"] * opts.small + ["--no-compile"] * opts.no_compile + ["--build-only"] * opts.build_only
    argv += ["--threads", str(opts.threads)] if opts.threads else []
    return argv + (["--only", opts.only] if opts.only else [])


def describe_run(opts, argv: list[str]) -> str:
    """The report's heading: device, programs, command, torch's version, how times are taken."""
    if opts.device == "gpu":
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CUDA (built for sm_90, not run)"
    else:
        device = f"CPU, {torch.get_num_threads()} torch thread{'s' if torch.get_num_threads() > 1 else ''}"
    sizes = "small sizes" if opts.small else f"2^{opts.log2.replace(':', '-2^')} input elements"
    what = "outside.py's programs" if opts.set == "outside" else f"generated programs (seed {opts.seed}, {sizes})"
    command = f"### Performance fuzzer, {device}: {what}\n\n`python benchmarks/perf_fuzz.py {' '.join(argv)}`; torch {torch.__version__}"
    if opts.build_only:
        return command + "; compiled only (meta tensors), nothing run or timed"
    return (f"{command}; times per call (bench.time_call, {opts.repeats} batches of "
            f"{opts.budget}s); ratio = {'eager' if opts.no_compile else 'torch.compile'} time / babytriton time (> 1: babytriton is faster)")


def main(argv=None) -> str:
    """Warm up, time every program, print (and append to --markdown) the report; a worker's loop with --worker."""
    started = time.time()
    # the report counts kernels left serial or on Fallback; the pipeline's warning for each is noise here
    warnings.filterwarnings("ignore", message="babytriton: kernel .* runs about")
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = parse(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="perf_fuzz_"))
    workdir.mkdir(parents=True, exist_ok=True)
    if opts.worker:
        worker(opts, workdir)
        return ""
    programs = entries(opts, workdir)
    pool = warm_up(programs, opts, workdir, started)
    jsonl = open(opts.jsonl, "w") if opts.jsonl else None
    records = []
    for i, entry in enumerate(programs):
        if time.time() > (started + opts.max_seconds if opts.max_seconds else float("inf")):
            break
        if "crash" in pool.get(entry.name, {}):
            print(progress_line(i, len(programs), pool[entry.name]), flush=True)
            continue
        if opts.jobs > 0 and entry.name not in pool:
            continue  # the workers did not reach it: its compiles here would be cold (and might not end)
        record = pool[entry.name] if opts.build_only and entry.name in pool else measure(entry, opts)
        record.update({k: v for k, v in pool.get(entry.name, {}).items() if k.endswith("seconds")})
        records.append(record)
        print(progress_line(i, len(programs), record), flush=True)
        if jsonl:
            jsonl.write(json.dumps(record) + "\n")
            jsonl.flush()
        torch._dynamo.reset()
    if jsonl:
        jsonl.close()
    text = report(records, opts, len(programs), pool, describe_run(opts, argv))
    text += compile_times(pool, records, time.time() - started)
    print("\n" + text, flush=True)
    if opts.markdown:
        with open(opts.markdown, "a") as out:
            out.write(text + "\n")
    return text


def warm_up(programs: list[Entry], opts, workdir: Path, started: float) -> dict[str, dict]:
    """The workers' compiles (until 60% of --max-seconds), by program name; none with --jobs 0."""
    if opts.jobs <= 0 or not programs:
        return {}
    if not config.disk_enabled(True) and not opts.build_only:
        print("perf_fuzz: BABYTRITON_CACHE=0 turns babytriton's disk cache off: the workers' compiles are lost", flush=True)
    until = started + (0.6 if not opts.build_only else 1.0) * opts.max_seconds if opts.max_seconds else float("inf")
    pool = Pool(worker_argv(opts, workdir), opts.jobs, workdir, opts.compile_timeout).run([e.name for e in programs], until)
    print(f"warm-up: {len(pool)} of {len(programs)} programs compiled on {opts.jobs} workers in "
          f"{time.time() - started:.0f} s", flush=True)
    return pool


def compile_times(pool: dict, records: list[dict], seconds: float) -> str:
    """Compile times, median per program: the workers' (cold, to size the pool) and the timing
    process's (first call included; from the caches where the workers filled them); the wall time."""
    def median(rows, key):
        values = [w[key] for w in rows if key in w]
        return f"{percentile(values, 50):.2f} s" if values else "-"
    return (f"\nCompiles, median per program: in the workers (cold) babytriton {median(pool.values(), 'bt_seconds')}, "
            f"torch.compile {median(pool.values(), 'compile_seconds')}; in the timing process babytriton "
            f"{median(records, 'bt compile seconds')}, torch.compile {median(records, 'torch.compile seconds')}. "
            f"Wall time {seconds:.0f} s.\n")


if __name__ == "__main__":
    main()
