# Exercise starter for chapter 17 - for loops: unrolled under a threshold, recursive above it
#
# Exercise 4 of the tutorial (for loops), to solve on chapter 13. Fill in the functions that raise
# NotImplementedError("exercise 4 ..."); the comments below say what the finished chapter does.
# Check your answer with `pytest exercises -k 17_for_loops`; the solution is
# chapters/17_for_loops.py, and `diff exercises/17_for_loops.py chapters/17_for_loops.py` shows it.
#
# What: `for i in range(...)` in two ways.
#   - Unrolled: when the number of iterations is known while compiling and
#     is at most the JIT's `unroll` option (16 by default), the code
#     generator simply compiles the body once per iteration, with `i` a
#     constant each time. The IR has no loop at all.
#   - Recursive: otherwise (more iterations, or a count known only at run
#     time, `range(n)` with `n` a 0-d integer tensor), the loop becomes two
#     Relax functions. `loop0_body(i, <state>, <inputs>)` runs one
#     iteration and returns the new state: the variables the body assigns
#     that existed before the loop. `loop0(lo, hi, <state>, <inputs>)` runs
#     iterations lo..hi-1: one left, it calls the body; more, it calls
#     itself on the first half, then on the second half with the state the
#     first half returned. The function being compiled calls
#     `loop0(0, count, ...)` and unpacks the state it returns.
#
# Why: Relax has no loop statement; a function that calls itself is how it
# repeats work an unknown number of times. Relax functions cannot see each
# other's variables, so everything the body reads from outside is passed in
# (`<inputs>`), and everything it changes is passed in and returned
# (`<state>`). The state must keep its type from one iteration to the next
# (a Relax function has one signature): `acc = 0.0` before a loop that adds
# a (2, 3) tensor to it is refused.
#
# Why halves, and not `loop0(i + 1, ...)` after each iteration? The Relax VM
# runs a call inside a call on the C++ stack: a loop of 10 000 iterations
# would nest 10 000 calls deep, which crashes Python with a segmentation
# fault. Splitting the range in halves nests only log2(count) calls deep:
# 14 for 10 000 (and 2 * count - 1 calls in all).
#
# Why a separate body function? FuseOps fuses only the dataflow blocks at a
# function's top level: inside the `If` of `loop0` nothing would fuse. In a
# function of its own, the body fuses as any function does.
#
# Unrolling is faster for short loops (no calls, and the iterations fuse
# with each other and with the code around the loop) but grows the IR with
# every iteration, hence the threshold.
#
# Also new: `x += y`, which means `x = x + y` (tensors are values); and, as
# chapter 16 found, a module whose functions branch is built without TVM's
# memory planner StaticPlanBlockMemory (apache/tvm issue 17348).
#
# What to look at: the unrolled Relax, three copies of the body; then the
# recursive version: `loop0_body` (one fused kernel), `loop0` with its
# `if one_left:` and the two calls to itself, and `cls.loop0(R.const(0,
# "int64"), R.const(100, "int64"), ...)` in the main function; last, the
# guard `if loop0_runs:` that a count known only at run time adds, since
# `range(n)` may be empty.
#
# Run: python exercises/17_for_loops.py
import ast
import contextlib
import functools
import importlib

import torch
import tvm
import tvm_ffi
from tvm import relax as rx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import relax as RB

import pathlib  # the starter's own lines: chapter 13 is in chapters/, beside exercises/
import sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor
INDEX = rx.TensorType([], "int64")  # loop indices and counts: 0-d int64 tensors


def int64(value):
    return rx.const(value, "int64")


def assigned_names(statements):
    """The names a block of statements assigns, in order of first assignment (nested blocks too)."""
    names = []
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                names.append(node.id)
    return names


def loaded_names(statements):
    """The names a block of statements reads (an augmented assignment reads its target too)."""
    names = []
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.append(node.id)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
    return list(dict.fromkeys(names))


def has_if(mod):
    """Whether any Relax function of the module branches."""
    return any(isinstance(binding.value, rx.If)
               for func in mod.functions.values() if isinstance(func, rx.Function)
               for block in func.body.blocks for binding in block.bindings)


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    unroll = 16  # the JIT sets it from its option

    def __init__(self, fn):
        super().__init__(fn)
        self.loops = 0  # loops compiled to functions so far: loop0, loop1, ...
        self.loop_depth = 0
        self.local_to = {}  # name -> the loop whose body assigned it (and kept it)

    # ---- statements --------------------------------------------------------------------------
    def visit_AugAssign(self, node):
        # x += y is x = x + y
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "only `name += value` is supported")
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        self.visit(ast.copy_location(ast.Assign([node.target], value), node))

    def visit_Name(self, node):
        if node.id not in self.symbols and node.id in self.local_to:
            raise self.error(node, f"name {node.id!r} is only assigned in {self.local_to[node.id]}, "
                                   "so it has no value here")
        return super().visit_Name(node)

    def visit_Return(self, node):
        if self.loop_depth:
            raise self.error(node, "`return` inside a loop is not supported: assign the result "
                                   "to a variable and return it at the end")
        super().visit_Return(node)

    def visit_For(self, node):
        raise NotImplementedError("exercise 4 (for loops): CodeGenerator.visit_For")

    def range_arguments(self, call):
        """start, stop, step: ints written in the code, except stop, which may be a 0-d integer tensor."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"
                and 1 <= len(call.args) <= 3 and not call.keywords):
            raise self.error(call, "loops must be over range(stop) or range(start, stop[, step])")
        args = [self.literal(arg) for arg in call.args]
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
        if type(start) is not int or type(step) is not int or step == 0:
            raise self.error(call, "range(): start and step must be ints written in the code (step not 0); "
                                   "stop may be a 0-d integer tensor")
        if type(stop) is not int:
            if not isinstance(stop, rx.Var):
                stop = RB.emit(stop)
            if stop.ty.ndim != 0 or not str(stop.ty.dtype).startswith(("int", "uint")):
                raise self.error(call, f"range() needs an integer; got a {stop.ty.dtype} tensor "
                                       f"of {stop.ty.ndim} dimensions")
            if str(stop.ty.dtype) != "int64":
                stop = RB.emit(rx.op.astype(stop, "int64"))
        return start, stop, step

    def literal(self, node):
        """An int written in the code (`3`, `-1`) as a Python int; anything else compiled as usual."""
        try:
            return ast.literal_eval(node)
        except ValueError:
            return self.visit(node)

    # ---- a loop as two recursive functions ---------------------------------------------------
    def recursive_loop(self, node, start, stop, step):
        raise NotImplementedError("exercise 4 (for loops): CodeGenerator.recursive_loop")

    def trip_count(self, start, stop, step):
        """len(range(start, stop, step)) at run time; zero or less means no iteration."""
        raise NotImplementedError("exercise 4 (for loops): CodeGenerator.trip_count")

    @contextlib.contextmanager
    def function(self, name, params, result):
        """Declare a private Relax function, so that calls (its own too) can name it, and define it
        in the `with`, with a symbol table of its own: it sees only its parameters."""
        gvar = I.decl_function(name, rx.Function.create_empty([rx.Var(n, ty) for n, ty in params], result))
        outer = self.symbols
        self.symbols = {}
        self.loop_depth += 1
        failed = None
        try:
            with RB.function(is_private=True):
                RB.func_name(name)
                try:
                    yield gvar, [RB.arg(n, ty) for n, ty in params]
                except SyntaxError as error:
                    # End the function, then raise (as chapter 06 does): TVM warns "BlockBuilder
                    # destroyed with remaining blocks!" when it frees a frame an exception left open.
                    failed = error
                    RB.func_ret_value(rx.Tuple([]))
        finally:
            self.symbols = outer
            self.loop_depth -= 1
        if failed is not None:
            raise failed

    def body_function(self, name, node, start, step, state_names, input_names, params, result):
        """`<name>_body(i, state..., inputs...)`: one iteration; returns the new state."""
        raise NotImplementedError("exercise 4 (for loops): CodeGenerator.body_function")

    def halving_function(self, name, body, n_state, params, result):
        """`<name>(lo, hi, state..., inputs...)`: iterations lo..hi-1 (at least one), by halves."""
        raise NotImplementedError("exercise 4 (for loops): CodeGenerator.halving_function")


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    def __init__(self, fn, unroll=16, **options):
        if type(unroll) is not int or unroll < 0:
            raise ValueError(f"unroll must be a non-negative int, not {unroll!r}")
        super().__init__(fn, **options)
        self.unroll = unroll

    @classmethod
    def decorator(cls, fn=None, **options):
        if fn is None:
            return functools.partial(cls, **options)
        return cls(fn, **options)

    def codegen(self):
        generator = self.CodeGenerator(self.fn)
        generator.unroll = self.unroll
        return generator.visit(self.parse())

    def build(self, mod):
        if not has_if(mod):
            return super().build(mod)
        with tvm.transform.PassContext(opt_level=3, disabled_pass=["StaticPlanBlockMemory"]):
            return super().build(mod)


jit = JIT.decorator


def kernels_called(mod, name):
    """The PrimFuncs a Relax function calls, in order (at its top level)."""
    return [binding.value.args[0].name_hint for block in mod[name].body.blocks for binding in block.bindings
            if isinstance(binding.value, rx.Call) and isinstance(binding.value.op, tvm.ir.Op)
            and binding.value.op.name == "relax.call_tir"]


# ---- Follow-up, beyond the lesson ------------------------------------------------------------
# - With chapter 14's operators, the index takes part in arithmetic (`y = y * 0.5 + x * i`): `i` is
#   a 0-d int64 tensor here, and `x * i` needs torch's promotion to float32.
# - Python numbers as loop state (`total = 0.0; total += 1.0`) fold while unrolled, and must become
#   tensors before a recursive loop; `if` inside a loop body needs chapter 16.
# The package does all of it, and `break`/`while` too: babytriton/codegen/loops.py.


if __name__ == "__main__":

    def smooth(x: Tensor((2, 3), "float32")):
        y = x + 0.0
        for i in range(3):
            y = y + y + x
        return y

    print("Three iterations, unrolled (unroll=16):")
    print(JIT(smooth).codegen().script())

    def long_smooth(x: Tensor((2, 3), "float32")):
        y = x + 0.0
        for i in range(100):
            y = y + x + x
        return y

    recursive = JIT(long_smooth)
    print("\nA hundred iterations, above the threshold: recursive functions")
    print(recursive.codegen().script())
    lowered = recursive.lower(recursive.codegen())
    body_kernels = kernels_called(lowered, "loop0_body")
    print("kernels that loop0_body calls after fusion:", body_kernels)

    def counted(x: Tensor((2, 3), "float32"), n: Tensor((), "int64")):
        y = x + 0.0  # a new tensor: `+=` below would update x itself when torch runs this body
        for i in range(1, n, 2):
            y += x
        return y

    runtime = JIT(counted)
    script = runtime.codegen().script()
    print("\nA count known only at run time: range(1, n, 2)")
    print(script[script.index("    @R.function\n    def counted"):])

    x = torch.rand(2, 3)
    torch.testing.assert_close(JIT(smooth)(Tensor.of(x)), smooth(x))
    torch.testing.assert_close(recursive(Tensor.of(x)), long_smooth(x))
    for n in (0, 1, 2, 7, 5000):
        n = torch.tensor(n)
        torch.testing.assert_close(runtime(Tensor.of(x), Tensor.of(n)), counted(x, n))
    print("\nUnrolled, recursive, and run-time counts 0, 1, 2, 7 and 5000 all match torch.")
    torch.testing.assert_close(JIT(smooth, unroll=0)(Tensor.of(x)), smooth(x))
    print("With unroll=0 the three-iteration loop is recursive too, and still matches.")

    def drifts(x: Tensor((2, 3), "float32")):
        acc = 0.0
        for i in range(20):
            acc = acc + x
        return acc

    try:
        JIT(drifts).codegen()
        raise AssertionError("a state variable that changes type should be refused")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: no loop function when unrolled; loop0 and loop0_body otherwise, the body fused")
    unrolled = JIT(smooth).codegen()
    assert [gv.name_hint for gv in unrolled.get_global_vars()] == ["smooth"]
    names = sorted(gv.name_hint for gv in recursive.codegen().get_global_vars())
    assert names == ["long_smooth", "loop0", "loop0_body"]
    assert len(body_kernels) == 1 and body_kernels[0].startswith("fused_")
    assert "if loop0_runs:" in script and "if one_left:" in script
