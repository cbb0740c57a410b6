# Chapter 27 - the grid-stride loop and autotuning
#
# On chapter 26 (tiles): two ways to stop a kernel from depending on one size
# of grid or of block chosen by hand.
#
# Exercise 14, the course's own, solved on chapter 26: exercises/27_autotune.py
# is this file with the answer (the strided loop and the tuner's choice) taken
# out; `diff exercises/27_autotune.py chapters/27_autotune.py` shows it.
#
# What:
#   - the grid-stride loop. `num_programs(0)` is the size of the grid (the
#     parameter `grid0` of chapter 24), and `for start in range(pid * BLOCK,
#     n, num_programs(0) * BLOCK)` lets a fixed number of programs cover any
#     n: program p takes blocks p, p + P, p + 2P, ... Chapter 21's `for`
#     takes `range(start, stop)`; with a step it becomes a loop over the trip
#     count, cdiv(stop - start, step), whose index is start + trip * step. On
#     the CPU a grid as large as the thread pool is all the parallelism
#     there is, and each task walks its share; on a GPU, a grid the size of
#     the machine's multiprocessors.
#   - `@autotune(configs=[{"BLOCK": 64}, ...], key=["n"])` over a kernel: the
#     first launch for a value of the key arguments compiles and times the
#     kernel under each config (a warm-up, then the best of a few runs), keeps
#     the fastest for that key, and later launches with the same key run it
#     at once. The grid may be a function of the config, `lambda meta:
#     (cdiv(n, meta["BLOCK"]),)`, since it depends on the block size.
#     A kernel that accumulates into its output would be changed by the
#     trial runs: Triton's `reset_to_zero` exists for that; this one has none.
#
# Why: the best BLOCK depends on the machine, the dtype and the size, and
# guessing it is the classic way to leave speed on the table. Timing a few
# candidates when a size is first seen costs milliseconds once; Triton and
# babytriton/triton (`triton.autotune`, `triton.Config`) do exactly this.
#
# What to look at: in `scale`'s PrimFunc, `for trip in range(...)` inside
# the program loop, its index `pid0 * 64 + trip * (grid0 * 64)`; 4 programs
# covering 1000 and 5 elements alike; the tuner's table of times per config
# and its choice (they differ from run to run: times are measured); the same
# key launched again, no new timing.
#
# Run: python chapters/27_autotune.py
import ast
import importlib
import inspect
import time

import torch
from tvm import tirx
from tvm.script.ir_builder import tirx as T

ch26 = importlib.import_module("26_dot_tiles")
constexpr, cdiv, program_id, arange, load, store = (ch26.constexpr, ch26.cdiv, ch26.program_id, ch26.arange,
                                                    ch26.load, ch26.store)


def num_programs(axis):
    raise RuntimeError("num_programs() is for kernels compiled by @jit")


class BlockCodeGenerator(ch26.BlockCodeGenerator):
    language = {**ch26.ch25.ch24.LANGUAGE, **ch26.ch25.REDUCTIONS, **ch26.TILES, num_programs: "num_programs"}
    grid_queries = (program_id, num_programs)

    def num_programs(self, node, axis):
        return self.extents[self.constant(axis, "num_programs's axis")]

    def visit_For(self, node):
        """`for i in range(start, stop, step)`, a positive step: a loop over the trip count."""
        call = node.iter
        if not (isinstance(call, ast.Call) and len(call.args) == 3):
            return super().visit_For(node)
        if not (isinstance(node.target, ast.Name) and self.callee(call.func) is range and not node.orelse):
            raise self.error(node, "a strided loop is `for name in range(start, stop, step)`")
        start, stop, step = (self.visit(arg) for arg in call.args)
        if type(step) is int and step <= 0:
            raise self.error(call.args[2], "the step of a loop here is positive")
        trips = self.combine(node, lambda a, b, c: tirx.floordiv(b - a + c - 1, c), start, stop, step,
                             python=lambda a, b, c: max(0, (b - a + c - 1) // c))
        with T.serial(0, trips if type(trips) is int else tirx.max(trips, 0)) as trip:  # none when start >= stop
            self.ib.name("trip", trip)
            with self.symbols.frame():
                self.symbols[node.target.id] = self.combine(node, lambda a, t, c: a + t * c, start, trip, step)
                for stmt in node.body:
                    self.visit(stmt)


class Kernel(ch26.Kernel):
    generator = BlockCodeGenerator

    def __getitem__(self, grid):
        """A grid, or a function of the launch's constexprs giving one (`lambda meta: ...`)."""
        if not callable(grid):
            return super().__getitem__(grid)
        return lambda *args, **kwargs: super(Kernel, self).__getitem__(grid(kwargs))(*args, **kwargs)


def jit(fn):
    return Kernel(fn)


class Autotuner:
    """A kernel launched with the fastest of `configs` (constexpr values), chosen once per value of `key`."""

    def __init__(self, kernel, configs, key):
        self.kernel, self.configs, self.key = kernel, configs, key
        self.best, self.timings = {}, {}

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid, args, kwargs):
        arguments = inspect.signature(self.kernel.fn).bind_partial(*args, **kwargs).arguments
        key = tuple(arguments[name] for name in self.key)
        if key not in self.best:
            self.timings[key] = {i: self.time(grid, args, kwargs, config) for i, config in enumerate(self.configs)}
            self.best[key] = self.configs[min(self.timings[key], key=self.timings[key].get)]
        self.kernel[grid](*args, **kwargs, **self.best[key])

    def time(self, grid, args, kwargs, config, runs=5):
        """Seconds per launch under `config`: one run to compile, then the best of `runs`."""
        launch = self.kernel[grid]
        launch(*args, **kwargs, **config)
        times = []
        for _ in range(runs):
            begin = time.perf_counter()
            launch(*args, **kwargs, **config)
            times.append(time.perf_counter() - begin)
        return min(times)


def autotune(configs, key):
    return lambda kernel: Autotuner(kernel, configs, key)


if __name__ == "__main__":

    @jit
    def scale(x, out, n, BLOCK: constexpr):
        for start in range(program_id(0) * BLOCK, n, num_programs(0) * BLOCK):
            offs = start + arange(0, BLOCK)
            mask = offs < n
            store(out + offs, load(x + offs, mask=mask) * 3.0, mask=mask)

    print("scale as TIR: a strided loop inside each program")
    x, out = torch.randn(1000), torch.empty(1000)
    scale_tir = scale.codegen(x, out, 1000, BLOCK=64).script()
    print(scale_tir)
    for n in (1000, 5):
        x, out = torch.randn(n), torch.empty(n)
        scale[(4,)](x, out, n, BLOCK=64)
        torch.testing.assert_close(out, x * 3.0)
    print("4 programs cover n = 1000 (16 blocks of 64) and n = 5 alike: both match torch")

    @autotune(configs=[{"BLOCK": 64}, {"BLOCK": 256}, {"BLOCK": 1024}], key=["n"])
    @jit
    def add(x, y, out, n, BLOCK: constexpr):
        offs = program_id(0) * BLOCK + arange(0, BLOCK)
        mask = offs < n
        store(out + offs, load(x + offs, mask=mask) + load(y + offs, mask=mask), mask=mask)

    n = 1 << 20
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    add[lambda meta: (cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    print(f"\nautotuned add at n = {n}: microseconds per launch by config")
    for i, seconds in add.timings[(n,)].items():
        print(f"  {add.configs[i]}: {seconds * 1e6:.1f}")
    print(f"chosen: {add.best[(n,)]}")
    compilations = len(add.kernel.compiled)
    add[lambda meta: (cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    print(f"launched again with n = {n}: the same choice, {len(add.kernel.compiled)} compilations in all")

    print("Checking: a strided loop over num_programs, three configs timed once, none compiled twice")
    assert "for trip in range(" in scale_tir and "grid0 * 64" in scale_tir
    assert compilations == 3 == len(add.kernel.compiled) and len(add.timings) == 1
