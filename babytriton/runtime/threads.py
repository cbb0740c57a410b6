"""The CPU threads compiled kernels run their parallel loops on: torch's OpenMP team, sized like torch's
(`torch.set_num_threads`) on the main thread and one thread on any other; TVM's own thread pool where
the team can't be had (no C compiler, or a torch without OpenMP), with the same sizes.

Why torch's team: a second pool of as many threads as cores is one too many. TVM's workers either
spin between kernels, taking the cores from torch's operators (on a 16-core Xeon torch's layer norm
took 57 ms instead of 8), or sleep, so that every parallel kernel pays for waking them (a 4 MB
middle-axis sum: 44 us, 14 us on hot threads; torch 17 us). torch's OpenMP threads stay awake a little
while after each operator, so a kernel launched between torch operators, or after another kernel,
finds them ready, and the two never compete for a core. Inductor's C++ kernels share the team the same
way (`#pragma omp parallel`). How: TVM's CPU code calls the parallel launch through a pointer in its
library (`__TVMBackendParallelLaunch`), which `run_on_torch_threads` points at threads.c's launcher.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
import tvm
import tvm_ffi
from tvm import relax

from ..core import config

SOURCE = Path(__file__).with_name("threads.c")
# the pointers TVM's CPU code calls through, and what each becomes
POINTERS = {"__TVMBackendParallelLaunch": "bt_parallel_launch",
            "__TVMBackendParallelBarrier": "bt_parallel_barrier"}

# TVM's own pool, for when torch's team can't be had. It is made once per OS thread, on its first
# parallel kernel, with TVM_NUM_THREADS workers (else half the cores on x86), and is never freed: not
# even when its thread ends. So any thread but the main one gets a pool of one (its kernels run on that
# thread alone): a program that starts a thread per task would otherwise leak a pool of workers per
# thread until thread creation fails. Its workers sleep at once after a kernel (a spinning pool holds
# every core while torch's threads run) and are not pinned (pinned workers fought torch's threads).
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("TVM_BIND_THREADS", "0")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")


GRAIN = 32768   # a thread's least share of a launch's elements: torch's (at::internal::GRAIN_SIZE)


class _Sizes(threading.local):
    """What this OS thread's launches were last sized to (None: not yet): its team, and the threads
    the launcher was last told to use (fewer for a small launch)."""
    threads = None
    launch = None

    def __init__(self):
        self.main = threading.current_thread() is threading.main_thread()


_sizes = _Sizes()
_pool_made = threading.Lock()  # TVM reads TVM_NUM_THREADS when it makes a pool: one thread at a time


def sync_threads(elements: int | None = None) -> None:
    """Size the calling thread's parallel launches: like torch's on the main thread, so that one
    setting holds for both, one thread on any other (see above); a launch of `elements` (known) on
    no more threads than it has GRAINs, as torch sizes its own loops: a team is woken and joined
    whole whatever its work (a 98k-element add ran at half torch's speed on 16 cores, torch's on 4).
    Called before each CPU call."""
    sizes = _sizes
    wanted = torch.get_num_threads() if sizes.main else 1
    if sizes.threads != wanted:
        _resize(sizes, wanted)
    launch = wanted
    if elements is not None and elements < wanted * GRAIN:   # comparisons: min/max calls cost a tenth of a launch
        launch = -(-elements // GRAIN) or 1
    if sizes.launch != launch:
        launcher = _launcher()[0]
        if launcher is not None:
            launcher.bt_set_threads(launch)
        sizes.launch = launch


def _resize(sizes: _Sizes, wanted: int) -> None:
    """TVM's pool sized to `wanted` threads of this OS thread (sync_threads)."""
    with _pool_made:   # TVM's pool too: CPU loops of device-block executables, and every one without the launcher
        cap = os.environ["TVM_NUM_THREADS"]
        if not sizes.main:
            os.environ["TVM_NUM_THREADS"] = "1"
        try:
            tvm.get_global_func("runtime.config_threadpool")(0, wanted)
        finally:
            os.environ["TVM_NUM_THREADS"] = cap
    sizes.threads = wanted


def pool() -> str:
    """Which threads parallel CPU kernels run on, and why not torch's where they don't."""
    why = _launcher()[1]
    return "torch's OpenMP threads" if not why else f"TVM's thread pool ({why})"


def run_on_torch_threads(executable, backend: str, library: str | None = None, loaded: bool = False):
    """The executable, its parallel loops launched on torch's OpenMP team. TVM's code built in memory
    keeps its launch pointer where no caller can reach it, so the code that runs is a library's: that
    of `library` (a disk cache entry of this code, `loaded` when `executable` came from it), else one
    exported for it. Unchanged where the team can't be had (`pool()` says why) or nothing links."""
    launcher = _launcher()[0]
    if launcher is None:
        return executable
    if library is not None:
        if not loaded:
            executable = load_executable(library, backend)
        _redirect(library, launcher)
        return executable
    with tempfile.TemporaryDirectory(prefix="babytriton-") as folder:
        library = os.path.join(folder, "lib.so")
        try:
            executable.export_library(library)   # TVM links with the C++ compiler
        except Exception:  # noqa: BLE001 - no linker: the in-memory code runs, on TVM's pool
            return executable
        executable = load_executable(library, backend)   # stays mapped after its file goes
        _redirect(library, launcher)
        return executable


def load_copy(library: str, backend: str):
    """The executable in a private copy of `library` (a disk cache entry's): mapped from a file that
    nothing else writes, so an entry damaged or replaced in place later can't fault the running code."""
    with tempfile.TemporaryDirectory(prefix="babytriton-") as folder:
        copy = os.path.join(folder, "lib.so")
        shutil.copyfile(library, copy)
        return load_executable(copy, backend)   # stays mapped after its file goes


def load_executable(library: str, backend: str):
    """The executable in a library file TVM exported (a disk cache entry's, or one linked here)."""
    module = tvm.runtime.load_module(library)
    # a backend="tir" library is the PrimFunc's own module, called directly (tir_backend)
    return relax.VMExecutable(module) if backend == "relax" else tvm.runtime.Executable(module)


def _redirect(library: str, launcher: ctypes.CDLL) -> None:
    """Point the loaded `library`'s launch pointers at the launcher's functions (the same dlopen
    handle as TVM's: the same path names the loaded library)."""
    loaded = ctypes.CDLL(library)
    for pointer, function in POINTERS.items():
        try:
            slot = ctypes.c_void_p.in_dll(loaded, pointer)
        except ValueError:   # code without that call has no pointer for it
            continue
        slot.value = _address(launcher, function)


def _address(library: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(library, name), ctypes.c_void_p).value


@functools.cache
def _launcher() -> tuple[ctypes.CDLL | None, str]:
    """(threads.c compiled and given the process's OpenMP and TVM error functions, "") or (None, why
    not). Compiled once per machine into the cache folder (about 0.1 s)."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None, "torch here does not run its operators on OpenMP"
    openmp = _openmp_runtime()
    if openmp is None:
        return None, "torch's OpenMP runtime is not loaded"
    try:
        launcher = ctypes.CDLL(str(_compiled()))
    except subprocess.CalledProcessError as e:
        return None, f"threads.c does not compile here: {(e.stderr or '').strip()[-200:] or e}"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"threads.c does not compile here: {e}"
    ffi = ctypes.CDLL(os.path.join(os.path.dirname(tvm_ffi.__file__), "lib", "libtvm_ffi.so"))
    functions = [(openmp, "GOMP_parallel"), (openmp, "GOMP_barrier"), (openmp, "omp_get_thread_num"),
                 (openmp, "omp_get_num_threads"), (ffi, "TVMFFIErrorMoveFromRaised"),
                 (ffi, "TVMFFIErrorSetRaised"), (ffi, "TVMFFIObjectDecRef")]
    launcher.bt_init(*(ctypes.c_void_p(_address(library, name)) for library, name in functions))
    return launcher, ""


def _openmp_runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime torch loaded (GNU libgomp, or Intel's or LLVM's, which answer to the same
    GOMP_ entry points): the process's own copy, so that the team is torch's."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {fields[5].strip() for fields in (line.split(maxsplit=5) for line in maps) if len(fields) == 6}
    except OSError:
        return None
    names = ("libgomp", "libiomp", "libomp")
    candidates = sorted((p for p in paths if os.path.basename(p).startswith(names)),
                        key=lambda p: not p.startswith(os.path.dirname(torch.__file__)))  # torch's own first
    for path in candidates:
        library = ctypes.CDLL(path)
        if all(hasattr(library, name) for name in ("GOMP_parallel", "GOMP_barrier", "omp_get_thread_num")):
            return library
    return None


def _compiled() -> Path:
    """threads.c built as a shared library, in the cache folder (else a temporary one). Its name ends
    in its own checksum, checked before it is loaded: dlopen maps a library truncated on disk (a crash
    mid-write, a full disk) as if whole, and its first call past the end killed the process (SIGBUS).
    A damaged one is built again under a new inode (never rewritten in place: a process may map it)."""
    source = SOURCE.read_bytes()
    stem = f"threads-{hashlib.sha256(source).hexdigest()[:16]}"
    for folder in (config.cache_dir() / "native", Path(tempfile.gettempdir()) / f"babytriton-{os.getuid()}"):
        for path in sorted(folder.glob(f"{stem}-*.so")):
            if _intact(path):
                return path
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        partial = folder / f".{stem}.{os.getpid()}.{threading.get_ident()}"
        compiler = os.environ.get("CC", "cc")
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)],
                       check=True, capture_output=True, text=True, timeout=60)
        path = folder / f"{stem}-{hashlib.sha256(partial.read_bytes()).hexdigest()[:16]}.so"
        os.replace(partial, path)   # whole or not at all, for processes starting together
        return path
    raise OSError("no writable folder for the compiled launcher")


def _intact(path: Path) -> bool:
    """Whether a built launcher still has the checksum its name ends in (unreadable: no)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.stem.rsplit("-", 1)[1]
    except (OSError, IndexError):
        return False
