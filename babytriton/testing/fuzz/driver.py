"""The fuzzing driver: many programs in one process, in child processes (a crash is a finding) or in
several at once, and the report."""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .programs import generate
from .checking import FINDINGS, Outcome, check_file
from .minimising import _category, minimise


def reproducer(text: str, outcome: Outcome, threads: int = 0, cuda: bool = False) -> str:
    """A program file that shows a finding, ready for tests/testing/fuzz_regressions/ once it is fixed."""
    header = "".join(f"# {line}\n" for line in outcome.detail.splitlines()[:6])
    thread_kind = outcome.kind.startswith("thread") or outcome.kind == "fatal" and threads
    cuda_kind = outcome.kind.startswith("cuda") or outcome.kind == "fatal" and cuda
    return f"# {outcome.kind}: {FINDINGS.get(outcome.kind, '')}\n{header}{text}" + (
        f"THREADS = {threads}\n" if thread_kind and "THREADS =" not in text else "") + (
        "CUDA = True\n" if cuda_kind and "CUDA =" not in text else "")


@dataclass
class Report:
    programs: int = 0
    failures: list = field(default_factory=list)   # (seed, Outcome, reproducer path or None)
    invalid: list = field(default_factory=list)    # (seed, Outcome): generator bugs
    seconds: float = 0.0
    seed: int = 0
    threads: int = 0
    cuda: bool = False

    def summary(self) -> str:
        """N, seed, time, and the failures grouped by kind."""
        lines = [f"{self.programs} programs, seed {self.seed}, threads {self.threads or 'off'}, "
                 f"CUDA build {'on' if self.cuda else 'off'}, "
                 f"{self.seconds:.1f}s ({self.seconds / max(self.programs, 1):.2f}s each): "
                 f"{len(self.failures)} failures, {len(self.invalid)} invalid programs (generator bugs)"]
        kinds: dict = {}
        for seed, outcome, path in self.failures:
            kinds.setdefault(outcome.kind, []).append((seed, outcome, path))
        for kind, found in sorted(kinds.items(), key=lambda item: -len(item[1])):
            lines.append(f"  {kind} ({len(found)}): {FINDINGS.get(kind, '')}")
            for seed, outcome, path in found:
                first = outcome.detail.splitlines()[0] if outcome.detail else ""
                lines.append(f"    seed {seed}: {first[:160]}" + (f" -> {path}" if path else ""))
        for seed, outcome in self.invalid:
            lines.append(f"  invalid: seed {seed}: {outcome.detail.splitlines()[0][:160] if outcome.detail else ''}")
        return "\n".join(lines)


MINIMISE_PER_SORT = 3  # failures of one kind and category minimised per run; the rest saved as generated


def program_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def run(n: int, seed: int = 0, out: str | Path | None = None, minimise_failures: int = MINIMISE_PER_SORT,
        log=None, threads: int = 0, first: int = 0, progress=None, cuda: bool = False) -> Report:
    """Generate n programs, run each with torch, compiled (and, with `threads`, from that many threads
    at once) and eagerly, and compare (with `cuda`, also build each for CUDA: check_cuda); save each
    failure, minimised, under `out`. `first`: the index of the first program; `progress(index, outcome,
    path)` hears of each one before (outcome None) and after. `minimise_failures`: how many failures of
    each sort (kind and category) to minimise (True: MINIMISE_PER_SORT; False: none)."""
    if minimise_failures is True:
        minimise_failures = MINIMISE_PER_SORT
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    out_dir = _out_dir(out)
    seen: dict = {}
    with tempfile.TemporaryDirectory(prefix="bt_fuzz_") as tmp:
        workdir = Path(tmp)
        for index in range(first, n):
            s = program_seed(seed, index)
            if progress:
                progress(index, None, None)
            program = generate(s)
            text = program.module_text()
            path = workdir / f"program_{s}.py"
            path.write_text(text)
            if out_dir is not None:  # a hard crash (the process dies) leaves this behind as the reproducer
                (out_dir / "_current.py").write_text(text)
            outcome = check_file(path, threads, cuda)
            path.unlink()
            report.programs += 1
            saved = None
            if outcome.kind == "invalid":
                report.invalid.append((s, outcome))
                if log:
                    log(f"[{index}] seed {s}: generator wrote an invalid program: {outcome.detail.splitlines()[0]}")
            elif outcome.failed:
                # minimising takes up to a few dozen runs: only the first few failures of each sort
                sort = (outcome.kind, _category(outcome))
                seen[sort] = seen.get(sort, 0) + 1
                shrink = minimise_failures and seen[sort] <= int(minimise_failures)
                outcome, saved = _save_failure(report, s, text, outcome, workdir if shrink else None, out_dir,
                                               threads, cuda)
                if log:
                    log(f"[{index}] seed {s}: {outcome.kind}: "
                        f"{outcome.detail.splitlines()[0] if outcome.detail else ''}" + (f" -> {saved}" if saved else ""))
            if progress:
                progress(index, outcome, saved)
    if out_dir is not None:
        (out_dir / "_current.py").unlink(missing_ok=True)
    report.seconds = time.perf_counter() - start
    return report


def _out_dir(out: str | Path | None) -> Path | None:
    """The folder reproducers go to (made here), or None."""
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def _save_failure(report: Report, s: int, text: str, outcome: Outcome, workdir: Path | None, out_dir: Path | None,
                  threads: int, cuda: bool) -> tuple[Outcome, Path | None]:
    """A failing program counted in `report`, minimised first where a `workdir` is given, and saved under
    `out_dir` as its reproducer: (its outcome after minimising, the saved path or None)."""
    small, small_outcome = (minimise(text, outcome, workdir, threads=threads, cuda=cuda) if workdir is not None
                            else (text, outcome))
    saved = None
    if out_dir is not None:
        saved = out_dir / f"fuzz_{s}_{outcome.kind}.py"
        saved.write_text(reproducer(small, small_outcome, threads, cuda))
    report.failures.append((s, small_outcome, saved))
    return small_outcome, saved


def run_isolated(n: int, seed: int = 0, out: str | Path | None = None, minimise_failures: int = MINIMISE_PER_SORT,
                 log=None, threads: int = 0, cuda: bool = False, first: int = 0) -> Report:
    """run() in a child process: a program that kills it (SIGSEGV, abort) is a "fatal" finding, its
    program saved as the reproducer, and a new child goes on with the next program."""
    import signal
    import subprocess
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    out_dir = _out_dir(out)
    while first < n:
        command = [sys.executable, "-m", "babytriton.testing.fuzz", "--worker", str(n), str(seed), str(first),
                   str(threads), str(int(minimise_failures)), str(out_dir) if out_dir is not None else "",
                   str(int(cuda))]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        current = _read_worker(child.stdout, report, seed, log)
        code = child.wait()
        if current is None:
            if code != 0:
                raise RuntimeError(f"the fuzzing worker failed (exit {code}) outside any program")
            break
        s = program_seed(seed, current)
        name = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else f"exit {code}"
        outcome = Outcome("fatal", f"the process died ({name}) checking this program"
                          + (f" with {threads} threads" if threads else ""))
        saved = None
        if out_dir is not None:
            saved = out_dir / f"fuzz_{s}_fatal.py"
            saved.write_text(reproducer(generate(s).module_text(), outcome, threads, cuda))
            (out_dir / "_current.py").unlink(missing_ok=True)
        report.programs += 1
        report.failures.append((s, outcome, saved))
        if log:
            log(f"[{current}] seed {s}: fatal: {outcome.detail}")
        first = current + 1
    report.seconds = time.perf_counter() - start
    return report


def _read_worker(lines, report: Report, seed: int, log) -> int | None:
    """The outcomes a worker (run_isolated's child) prints, counted in `report`; the index of the
    program it was checking when its output ended (None: it ended between programs)."""
    import json
    current = None
    for line in lines:
        if not line.startswith(_WORKER_MARK):
            continue
        message = json.loads(line[len(_WORKER_MARK):])
        if message["kind"] is None:
            current = message["index"]
            continue
        current = None
        outcome = Outcome(message["kind"], message["detail"])
        report.programs += 1
        s = program_seed(seed, message["index"])
        if outcome.kind == "invalid":
            report.invalid.append((s, outcome))
        elif outcome.failed:
            report.failures.append((s, outcome, Path(message["path"]) if message["path"] else None))
            if log:
                log(f"[{message['index']}] seed {s}: {outcome.kind}: {outcome.detail.splitlines()[0][:200]}")
    return current


PARALLEL_CHUNK = 25  # programs a worker process takes at a time in run_parallel


def run_parallel(n: int, seed: int = 0, out: str | Path | None = None, jobs: int = 2,
                 minimise_failures: int = MINIMISE_PER_SORT, log=None, threads: int = 0,
                 cuda: bool = False) -> Report:
    """run_isolated() over `jobs` worker processes at once: programs 0..n-1 of `seed` (the same ones a
    single run checks) in chunks of PARALLEL_CHUNK, each job saving under its own `out`/jobJ."""
    import threading
    import time
    report = Report(seed=seed, threads=threads, cuda=cuda)
    start = time.perf_counter()
    chunks = iter(range(0, n, PARALLEL_CHUNK))
    lock = threading.Lock()

    def work(job: int):
        folder = Path(out) / f"job{job}" if out is not None else None
        while True:
            with lock:
                first = next(chunks, None)
            if first is None:
                return
            try:
                part = run_isolated(min(first + PARALLEL_CHUNK, n), seed, folder, minimise_failures, log, threads,
                                    cuda, first)
            except RuntimeError as e:  # a worker that failed outside any program: the chunk is lost, said so
                if log:
                    log(f"programs {first}..{first + PARALLEL_CHUNK - 1}: {e}")
                continue
            with lock:
                report.programs += part.programs
                report.failures += part.failures
                report.invalid += part.invalid
    workers = [threading.Thread(target=work, args=(j,)) for j in range(max(jobs, 1))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    report.seconds = time.perf_counter() - start
    return report


_WORKER_MARK = "@@fuzz "


def _worker(argv) -> None:
    import json
    n, seed, first, threads, minimise_failures, out, cuda = argv

    kill_at = os.environ.get("BT_FUZZ_KILL_AT")  # tests of run_isolated: die as a segfault would

    def progress(index, outcome, path):
        message = {"index": index, "kind": outcome and outcome.kind, "detail": outcome and outcome.detail,
                   "path": str(path) if path else None}
        print(_WORKER_MARK + json.dumps(message), flush=True)
        if outcome is None and kill_at is not None and index == int(kill_at):
            import signal
            os.kill(os.getpid(), signal.SIGSEGV)
    run(int(n), int(seed), out or None, int(minimise_failures), threads=int(threads), first=int(first),
        progress=progress, cuda=bool(int(cuda)))
