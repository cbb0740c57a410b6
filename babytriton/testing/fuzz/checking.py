"""Running a program: translated into plain torch (the oracle), compiled and eagerly, compared."""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import oracle
from ...core.errors import CompilationError
from .values import DEFAULT_TOLERANCE, EPS, NAMES
from .arguments import make_args


@dataclass
class Outcome:
    """kind: "ok"; "invalid" (a generator or translation bug, not babytriton's); or a finding (see
    FINDINGS)."""
    kind: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FINDINGS


# what babytriton can get wrong, each compared with plain torch on the same inputs
FINDINGS = {
    "torch-mismatch": "the compiled result differs from torch's (value, dtype or shape)",
    "should-raise": "torch raises on the program (e.g. max of an empty tensor); the compiled call returned a value",
    "unclean-error": "torch raises; the compiled call raised, but not a clean Python error (TVM internals)",
    "compile-error": "torch runs the program; babytriton refuses it",
    "crash": "torch runs the program; the compiled call raised",
    "mismatch": "the compiled result differs from the eager reference's (torch agrees with the compiled one)",
    "eager-error": "the eager reference raised where torch and the compiled call ran",
    "thread-crash": "a call from one of several threads at once raised",
    "thread-mismatch": "a call from one of several threads at once returned another result",
    "thread-hang": "calls from several threads at once did not finish",
    "fatal": "the process died (a signal such as SIGSEGV) while checking the program",
    "cuda-build": "the program builds and runs on the CPU; building it for CUDA (sm_90) failed",
    "cuda-nvcc": "the program builds for CUDA (sm_90), but nvcc rejects the generated CUDA source",
}
# the GPU every program is also built for with `cuda`: nothing runs, so no GPU is needed
SM90 = {"kind": "cuda", "arch": "sm_90"}

_counter = itertools.count()


def load(path: str | Path):
    """Import a program file as a fresh module."""
    name = f"_bt_fuzz_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_file(path: str | Path, threads: int = 0, cuda: bool = False) -> Outcome:
    """Run a program file with torch, compiled and eagerly, and compare; with `threads`, also from
    that many threads at once (a file's THREADS asks for it too); with `cuda` (or the file's CUDA),
    also build it for CUDA."""
    try:
        module = load(path)
    except CompilationError as e:
        return Outcome("compile-error", f"at decoration: {e.message}")
    return check_module(module, Path(path).read_text(), threads or getattr(module, "THREADS", 0),
                        cuda or getattr(module, "CUDA", False))


def check_module(module, text: str | None = None, threads: int = 0, cuda: bool = False) -> Outcome:
    """torch is the oracle: the program translated into plain torch (testing/oracle.py) runs on the
    same inputs; the compiled call must give its dtypes, shapes and values (NaN equal to NaN), or,
    where torch raises, raise a clean Python error. The eager reference is a second opinion. With
    `cuda`, a program that passes is also built for sm_90 and its CUDA compiled by nvcc (check_cuda)."""
    def fresh():  # new tensors for each call (a copy would lose a view's strides or negative bit)
        return make_args(module.ARGS, module.SEED)

    if hasattr(module, "EXPECT_ERROR"):  # a program both ways must refuse
        return _check_refused(module, fresh(), module.EXPECT_ERROR)
    tolerances = module.TOLERANCES
    try:
        translated = oracle.translate(text if text is not None else Path(module.__file__).read_text())
    except Exception as e:  # noqa: BLE001
        return Outcome("invalid", f"torch translation: {type(e).__name__}: {e}")
    try:
        with _one_torch_thread():
            expected, torch_error = translated.f(*fresh()), None
    except Exception as e:  # noqa: BLE001 - torch refuses the program: babytriton must refuse it cleanly
        expected, torch_error = None, e
    if torch_error is not None:
        return _check_raises(module, fresh, torch_error)
    for attempt in range(2):  # the first call compiles; the second takes the cached fast path
        try:
            got = module.f(*fresh())
        except CompilationError as e:
            return Outcome("compile-error", e.message)
        except Exception as e:  # noqa: BLE001 - anything else is a compiler crash
            return Outcome("crash", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}")
        problem = compare(got, expected, tolerances, ("compiled", "torch"))
        if problem:
            return Outcome("torch-mismatch", problem if attempt == 0 else f"(cached call) {problem}")
    try:
        eager = module.f.eager(*fresh())
    except Exception as e:  # noqa: BLE001
        return Outcome("eager-error", f"eager: {type(e).__name__}: {e}")
    problem = compare(got, eager, tolerances)
    if problem:
        return Outcome("mismatch", problem)
    if threads:
        outcome = check_threads(module.f, fresh, expected, tolerances, threads)
        if outcome.kind != "ok":
            return outcome
    return check_cuda(module.f, fresh()) if cuda else Outcome("ok")


def check_cuda(fn, args) -> Outcome:
    """`fn` (a @jit function that ran on the CPU) built for SM90 for the same arguments, and its CUDA
    source compiled to a cubin by nvcc, as the GPU's driver would compile it (where nvcc is
    installed). A refusal or crash of the build is "cuda-build"; nvcc's error, "cuda-nvcc"."""
    from ...jit import jit
    try:
        kernel = jit(fn.fn, **{**fn.options, "cache": False, "target": SM90}).compile(*args)
    except CompilationError as e:
        return Outcome("cuda-build", e.message)
    except Exception as e:  # noqa: BLE001 - a compiler crash
        return Outcome("cuda-build", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}")
    source = kernel.source
    if not source.strip() or shutil.which("nvcc") is None:
        return Outcome("ok")
    import tvm
    from tvm.support import nvcc
    try:
        with tvm.target.Target(SM90):
            nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")
    except Exception as e:  # noqa: BLE001 - nvcc's compile log
        errors = [line for line in str(e).splitlines() if "error" in line]
        return Outcome("cuda-nvcc", "\n".join(errors[:6]) or str(e)[-2000:])
    return Outcome("ok")


@contextlib.contextmanager
def _one_torch_thread():
    """torch's reference runs on one thread: its multi-threaded half-precision sums round each
    thread's partial sum (71,320 bfloat16 values summing to 13.5 give 14.0 on 4 threads), so only
    the one-thread result is the exactly rounded float32 accumulation the oracle promises."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _clean(error: BaseException) -> bool:
    """A clean Python error: no TVM exception in its chain, no TVM internals in its message."""
    seen = error
    while seen is not None:
        if type(seen).__module__.split(".")[0] == "tvm" or "TVM" in type(seen).__name__:
            return False
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    text = str(error)
    return isinstance(error, Exception) and not any(w in text for w in ("tvm.", "TVM", "Traceback", "src/"))


def _check_raises(module, fresh, torch_error: Exception) -> Outcome:
    """torch refuses the program: the compiled call must raise a clean Python error."""
    reason = f"torch raised {type(torch_error).__name__}: {str(torch_error).splitlines()[0] if str(torch_error) else ''}"
    try:
        got = module.f(*fresh())
    except Exception as e:  # noqa: BLE001
        if _clean(e):
            return Outcome("ok")
        return Outcome("unclean-error", f"{reason}; compiled raised {type(e).__name__}: {str(e)[:500]}")
    return Outcome("should-raise", f"{reason}; compiled returned {_short(got)}")


def check_threads(fn, fresh, expected, tolerances, threads: int, calls: int = 25, timeout: float = 120.0) -> Outcome:
    """`fn` called `calls` times from each of `threads` threads at once, each result compared with
    torch's."""
    import threading
    problems = []
    barrier = threading.Barrier(threads)
    inputs = [fresh() for _ in range(threads)]

    def work(index):
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        for call in range(calls):
            try:
                got = fn(*inputs[index])
            except Exception as e:  # noqa: BLE001
                problems.append(("thread-crash", f"thread {index}, call {call}: {type(e).__name__}: {e}"))
                return
            problem = compare(got, expected, tolerances, ("compiled", "torch"))
            if problem:
                problems.append(("thread-mismatch", f"thread {index}, call {call}: {problem}"))
                return

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout)
    if any(w.is_alive() for w in workers):
        return Outcome("thread-hang", f"{threads} threads x {calls} calls: not done after {timeout:.0f}s")
    if problems:
        kind, detail = problems[0]
        return Outcome(kind, f"{threads} threads x {calls} calls, {len(problems)} went wrong; first: {detail}")
    return Outcome("ok")


def _check_refused(module, args, expected: str) -> Outcome:
    """A program the compiler must refuse with `expected` in its message; the eager run too, unless
    the file says EAGER_RUNS (the refusal is about compiled sizes, not Python's meaning)."""
    try:
        module.f(*args)
    except CompilationError as e:
        if expected not in e.message:
            return Outcome("mismatch", f"compiled: refused with another message: {e.message}")
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", f"{type(e).__name__}: {e}")
    else:
        return Outcome("mismatch", "compiled: ran, but should refuse the program")
    if getattr(module, "EAGER_RUNS", False):
        return Outcome("ok")
    try:
        module.f.eager(*args)
    except Exception as e:  # noqa: BLE001
        if expected not in str(e):
            return Outcome("mismatch", f"eager: refused with another message: {e}")
        return Outcome("ok")
    return Outcome("mismatch", "eager: ran, but should refuse the program")


def compare(got, expected, tolerances, names=("compiled", "eager")) -> str | None:
    """What differs between a compiled result and the expected one (None: nothing): dtypes, shapes,
    then values within (atol, rtol), NaN equal to NaN. An expected Python number (torch's result of
    arithmetic on numbers) is compared by value only."""
    ours, theirs = names
    if isinstance(expected, tuple) or isinstance(got, tuple):
        if not (isinstance(got, tuple) and isinstance(expected, tuple)) or len(got) != len(expected):
            return f"results differ in structure: {ours} {_short(got)}, {theirs} {_short(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare(g, e, [tolerances[i]] if tolerances and i < len(tolerances) else None, names)
            if problem:
                return f"result {i}: {problem}"
        return None
    if got is None or expected is None:
        return None if got is expected else f"{ours} {_short(got)}, {theirs} {_short(expected)}"
    if isinstance(expected, (bool, int, float)) and isinstance(got, torch.Tensor) and got.dim() == 0:
        expected = torch.tensor(expected, dtype=got.dtype)
    if not isinstance(got, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return f"{ours} {_short(got)}, {theirs} {_short(expected)}"
    if got.dtype != expected.dtype:
        return f"dtype: {ours} {got.dtype}, {theirs} {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape: {ours} {tuple(got.shape)}, {theirs} {tuple(expected.shape)}"
    name = NAMES[got.dtype]
    if tolerances:
        atol, rtol = tolerances[0]
        if atol or rtol:  # inexact: at least a few roundings of the dtype torch computed in (the
            rtol = max(rtol, 4 * EPS.get(name, 0.0))  # generator's dtype model can be finer)
    else:
        atol, rtol = DEFAULT_TOLERANCE.get(name, (0.0, 0.0))
    g, e = got.resolve_neg().double(), expected.resolve_neg().double()
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True) if atol or rtol else \
        (g == e) | (g.isnan() & e.isnan())
    if bool(close.all()):
        return None
    bad = (~close).nonzero()[0].tolist()
    return (f"values differ at {tuple(bad)}: {ours} {g[tuple(bad)].item()!r}, {theirs} {e[tuple(bad)].item()!r} "
            f"(atol {atol:g}, rtol {rtol:g}; {int((~close).sum())} of {close.numel()} differ)")


def _short(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<{value.dtype} {tuple(value.shape)}>"
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ")"
    return repr(value)
