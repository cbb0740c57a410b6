"""MetaSchedule: tuning with an on-disk database (under the cache directory) that later runs reuse."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import logging
import os
import sys
from pathlib import Path

import tvm
from tvm import relax

from ..core.errors import debug_enabled


TUNE_EXTRAS = ("psutil", "cloudpickle", "xgboost")
BUILD_TIMEOUT_S = 300


def tuning_dir() -> Path:
    from ..core.config import cache_dir
    return cache_dir() / "meta_schedule"


def require_tuning_extras() -> None:
    missing = [name for name in TUNE_EXTRAS if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"schedule='meta_schedule' needs {', '.join(missing)}: "
                          "pip install 'babytriton[tune]'")


def _tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    config = dict(target.export())
    if config["kind"] == "llvm" and "num-cores" not in config:
        config["num-cores"] = os.cpu_count() or 1  # MetaSchedule refuses a CPU target without it
    return tvm.target.Target(config)


def meta_schedule(mod: tvm.IRModule, target: tvm.target.Target, trials: int) -> tvm.IRModule:
    """Tune the kernels that the database has no record of, then apply the best records."""
    require_tuning_extras()
    from tvm.s_tir import meta_schedule as ms

    target = _tuning_target(target)
    work_dir = tuning_dir() / hashlib.sha256(str(target).encode()).hexdigest()[:16]
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    tasks = ms.relax_integration.extract_tasks(mod, target)
    todo = [t for t in tasks if database.query_tuning_record(t.dispatched[0], target, "main") is None]
    if todo:
        import_tensor_intrinsics(target.kind.name)
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(todo, work_dir=str(work_dir))
        per_task = max(trials, 1)
        progress = _progress_bar([t.task_name for t in todo], per_task)
        # MetaSchedule logs every round to stdout; keep that in its log files and show the bar instead.
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.DEBUG if debug_enabled() else logging.WARNING)
        ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=str(work_dir), database=database,
            # each build is a fresh process importing TVM: on a busy 2-core machine that alone can take 30 s
            # each build worker knows babytriton's NaN-propagating reducers (cross-thread reductions look them
            # up) and imports TVM's tensor intrinsics the fast way (34 s otherwise, in every batch's new process)
            builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S,
                                            initializer=functools.partial(_prepare_worker, target.kind.name)),
            max_trials_global=per_task * len(todo), max_trials_per_task=per_task,
            num_trials_per_iter=min(8, per_task), cost_model="xgb",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress])
        sys.stderr.write("\n")
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)


@contextlib.contextmanager
def _frames_memoised():
    """Memoise inspect.getmodule for frames by file name while TVM parses its ~500 TVMScript intrinsics.

    Each parse calls inspect.stack(), and with torch loaded every frame's lookup scans all of sys.modules:
    75 of the 130 s that tuning one element-wise kernel took on 2 cores. A frame's module is its file's.
    """
    original = inspect.getmodule
    memo: dict = {}

    def getmodule(obj, _filename=None):
        if _filename is None or not (inspect.isframe(obj) or inspect.iscode(obj)):
            return original(obj, _filename)
        if _filename not in memo:
            memo[_filename] = original(obj, _filename)
        return memo[_filename]

    inspect.getmodule = getmodule
    try:
        yield
    finally:
        inspect.getmodule = original


# The tensor intrinsics that each target kind's schedule rules can use. TVM's tensor_intrin package
# registers every kind's at once; CUDA's alone are 6 of its 9 s on 2 cores, wasted when tuning for a CPU.
INTRINSICS = {"llvm": ("x86", "arm_cpu", "riscv_cpu"), "cuda": ("cuda",), "rocm": ("rocm",),
              "metal": ("metal",), "hexagon": ("hexagon",)}
INTRINSICS_PACKAGE = "tvm.s_tir.tensor_intrin"


def import_tensor_intrinsics(*kinds: str) -> None:
    """Register the tensor intrinsics that these target kinds' rules can use (see INTRINSICS), before
    MetaSchedule's TuneContext would register every kind's; all of them without a kind or for a kind not
    in INTRINSICS. Either way the parse is memoised (_frames_memoised)."""
    with _frames_memoised():
        if not kinds or any(kind not in INTRINSICS for kind in kinds):
            importlib.import_module(INTRINSICS_PACKAGE)
            return
        if INTRINSICS_PACKAGE not in sys.modules:
            # MetaSchedule imports the package only to register intrinsics (TuneContext, the builder): an
            # unexecuted package satisfies that import, and its modules still import one by one
            package = importlib.util.module_from_spec(importlib.util.find_spec(INTRINSICS_PACKAGE))
            sys.modules[INTRINSICS_PACKAGE] = package
            tvm.s_tir.tensor_intrin = package  # as an import sets it
        for name in {name for kind in kinds for name in INTRINSICS[kind]}:
            importlib.import_module(f"{INTRINSICS_PACKAGE}.{name}")


def _prepare_worker(kind: str) -> None:
    """A build worker's set-up: babytriton's reducers, and `kind`'s tensor intrinsics (see INTRINSICS)."""
    from ..operators import legalize
    legalize.reducers()
    import_tensor_intrinsics(kind)


def _progress_bar(names: list[str], per_task: int):
    """A one-line progress bar on stderr while MetaSchedule measures candidates."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Progress(PyMeasureCallback):
        def __init__(self):
            self.total = per_task * len(names)
            self.done = 0

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            self.done = min(self.done + len(measure_candidates), self.total)
            width = 30
            filled = width * self.done // max(self.total, 1)
            name = names[task_id] if task_id < len(names) else ""
            sys.stderr.write(f"\r[babytriton] tuning [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} trials  {name[:40]:40s}")
            sys.stderr.flush()

    return Progress()
