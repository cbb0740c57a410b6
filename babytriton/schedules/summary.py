"""What scheduling did, per kernel: the rule and launch shape (`schedule_summary`, which `k.fusion`
shows), and the kernels still running a large amount of work on one CPU thread or one GPU block
(`serial_kernels`: the pipeline warns with SerialKernelWarning)."""
from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .analysis import find_all, is_buffer, own_target
from .wrappers import DECLINED_ATTR, RULE_ATTR


SERIAL_LIMIT = 10 ** 5  # loop iterations on one thread (one GPU block) that earn a warning
SYMBOLIC_GUESS = 4096   # what a symbolic size counts for in that estimate
# and a tensor of several symbolic axes counts at most SYMBOLIC_GUESS ** 2 elements: each of the
# three sizes of an (a, b, c) tensor counts 256, else a full sum's fold of its chunks of 4096 (a*b*c /
# 4096 partial sums, in fact 33 for an (8, 4096, 33) input) counted 16,777,216 serial iterations
SYMBOLIC_AXES = 2


class SerialKernelWarning(UserWarning):
    """A compiled kernel runs a large amount of work on one CPU thread or in one GPU block: no
    schedule rule spread it, so it is likely many times slower than it could be."""


def serial_work(func: tirx.PrimFunc, gpu: bool) -> int:
    """Loop iterations of `func` outside any loop that spreads them: a parallel loop on a CPU, a
    blockIdx loop on a GPU (either of extent > 1). A symbolic size counts as SYMBOLIC_GUESS, a
    tensor's several symbolic sizes together as at most SYMBOLIC_GUESS ** SYMBOLIC_AXES (`_guesses`)."""
    walk = _SerialWork(func, gpu)
    walk.visit(func.body, 1)
    return walk.total


class _SerialWork:
    """serial_work's walk: each leaf block counts its enclosing iterations, outside spreading loops."""

    def __init__(self, func: tirx.PrimFunc, gpu: bool):
        self.gpu, self.guesses = gpu, _guesses(func)
        self.total = 0
        self.bound = False   # inside a thread-bound loop: one launch

    def spreads(self, loop) -> bool:
        extent = loop.extent
        wide = not isinstance(extent, tirx.IntImm) or int(extent) > 1
        if self.gpu:
            return wide and loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None \
                and loop.thread_binding.thread_tag.startswith("blockIdx")
        return wide and loop.kind == tirx.ForKind.PARALLEL

    def extent_of(self, loop) -> int:
        try:
            return max(_estimate(loop.extent, self.guesses), 0)
        except (TypeError, ZeroDivisionError):
            return SYMBOLIC_GUESS

    def visit(self, stmt, iterations: int) -> None:
        if isinstance(stmt, tirx.For):
            if self.spreads(stmt):
                return
            inside, self.bound = self.bound, self.bound or stmt.kind == tirx.ForKind.THREAD_BINDING
            self.visit(stmt.body, iterations * self.extent_of(stmt))
            self.bound = inside
        elif isinstance(stmt, tirx.SeqStmt) and self.gpu and iterations == 1 and not self.bound:
            self.launches(stmt)
        elif isinstance(stmt, tirx.SeqStmt):
            for part in stmt.seq:
                self.visit(part, iterations)
        elif isinstance(stmt, s_tir.SBlockRealize):
            self.visit(stmt.block, iterations)
        elif isinstance(stmt, s_tir.SBlock):
            if stmt.init is not None:
                self.visit(stmt.init, iterations)
            before = self.total
            self.visit(stmt.body, iterations)
            if self.total == before:  # a leaf block: one iteration of its body per enclosing iteration
                self.total += iterations
        elif isinstance(stmt, tirx.IfThenElse):
            self.visit(stmt.then_case, iterations)
            if stmt.else_case is not None:
                self.visit(stmt.else_case, iterations)
        elif hasattr(stmt, "body"):  # LetStmt, AttrStmt, DeclBuffer, ...
            self.visit(stmt.body, iterations)

    def launches(self, stmt: tirx.SeqStmt) -> None:
        """GPU launches one after another (a split reduction's chunks, then its fold): the work of the
        largest is what one block runs, not their sum."""
        before, most = self.total, 0
        for part in stmt.seq:
            self.visit(part, 1)
            most, self.total = max(most, self.total - before), before
        self.total = before + most


_ARITH = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
          tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b, tirx.Min: min, tirx.Max: max}


def _guesses(func: tirx.PrimFunc) -> dict[str, int]:
    """Each size variable's guess: SYMBOLIC_GUESS, less where a parameter has more than SYMBOLIC_AXES
    symbolic axes, so that their product is SYMBOLIC_GUESS ** SYMBOLIC_AXES (the smallest guess over
    the parameters that use the variable)."""
    guesses: dict[str, int] = {}
    for param in func.params:
        shape = getattr(getattr(param, "ty", None), "shape", None) if is_buffer(param) else None
        names = {v.name for dim in (shape or ()) for v in tirx.analysis.undefined_vars(dim)}
        if len(names) > SYMBOLIC_AXES:
            guess = max(round(SYMBOLIC_GUESS ** (SYMBOLIC_AXES / len(names))), 1)
            for name in names:
                guesses[name] = min(guesses.get(name, SYMBOLIC_GUESS), guess)
    return guesses


def _estimate(expr, guesses: dict[str, int] | None = None) -> int:
    """An integer expression's value with every size variable at its guess (`_guesses`; SYMBOLIC_GUESS
    when it has none). TypeError if odd."""
    if isinstance(expr, tirx.IntImm):
        return int(expr)
    if isinstance(expr, tirx.Var):
        return (guesses or {}).get(expr.name, SYMBOLIC_GUESS)
    if isinstance(expr, tirx.Cast):
        return _estimate(expr.value, guesses)
    for kind, fn in _ARITH.items():
        if isinstance(expr, kind):
            return fn(_estimate(expr.a, guesses), _estimate(expr.b, guesses))
    raise TypeError(type(expr).__name__)


def launch_shape(func: tirx.PrimFunc, gpu: bool) -> str:
    """How a scheduled kernel runs: "grid G x block B" on a GPU (blocks and threads per block, each
    a tuple where several axes are bound), "parallel P x vector V" on a CPU ("serial" when no loop
    is parallel or vectorised). Symbolic extents are shown as expressions of the sizes."""
    bound: dict[str, list] = {}
    parallel, vector = [], []
    for loop in find_all(func.body, tirx.For):
        if loop.kind == tirx.ForKind.THREAD_BINDING and loop.thread_binding is not None:
            bound.setdefault(loop.thread_binding.thread_tag, []).append(loop.extent)
        elif loop.kind == tirx.ForKind.PARALLEL:
            parallel.append(loop.extent)
        elif loop.kind == tirx.ForKind.VECTORIZED:
            vector.append(loop.extent)

    def largest(extents):
        static = [int(e) for e in extents if isinstance(e, tirx.IntImm)]
        symbolic = list(dict.fromkeys(str(e) for e in extents if not isinstance(e, tirx.IntImm)))
        return symbolic[0] if symbolic else str(max(static))

    def dims(prefix):
        shown = [largest(bound[f"{prefix}.{axis}"]) for axis in "xyz" if f"{prefix}.{axis}" in bound]
        return "1" if not shown else shown[0] if len(shown) == 1 else f"({', '.join(shown)})"

    if gpu:
        return f"grid {dims('blockIdx')} x block {dims('threadIdx')}"
    shape = []
    if parallel:
        shape.append(f"parallel {largest(parallel)}")
    if vector:
        shape.append(f"vector {largest(vector)}")
    return " x ".join(shape) or "serial"


def schedule_summary(mod: tvm.IRModule, target: tvm.target.Target) -> dict[str, tuple[str, str, str]]:
    """kernel name -> (the rule that scheduled it, its launch shape, what the rules before it said
    where it ended on Fallback or on no rule: "Rule: reason; ..."), for `k.fusion`."""
    out = {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        attrs = func.attrs if func.attrs is not None else {}
        rule = str(attrs[RULE_ATTR]) if RULE_ATTR in attrs else \
            "tuned (MetaSchedule)" if "tirx.is_scheduled" in attrs else "none"
        why = str(attrs[DECLINED_ATTR]) if DECLINED_ATTR in attrs else ""
        out[gvar.name_hint] = (rule, launch_shape(func, own_target(func, target).kind.name == "cuda"), why)
    return out


def serial_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> list[tuple[str, int]]:
    """(kernel name, serial iterations) of each kernel over SERIAL_LIMIT, in name order."""
    found = []
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        work = serial_work(func, own_target(func, target).kind.name == "cuda")
        if work > SERIAL_LIMIT:
            found.append((gvar.name_hint, work))
    return sorted(found)
