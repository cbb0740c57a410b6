# Exercise starter for chapter 16 - if/else: a scoped symbol table, and where the dataflow blocks go
#
# Exercise 3 of the tutorial (if/else), to solve on chapter 13. Fill in the functions that raise
# NotImplementedError("exercise 3 ..."); the comments below say what the finished chapter does.
# Check your answer with `pytest exercises -k 16_if_else`; the solution is chapters/16_if_else.py,
# and `diff exercises/16_if_else.py chapters/16_if_else.py` shows it.
#
# What: `if cond:` with a tensor condition becomes a Relax `If`, with and
# without `else`. The condition must be a 0-d bool tensor: one truth value
# per call, computed at run time. Chapter 13 knows only `+`, so here the
# condition is a parameter, `flag: Tensor((), "bool")`; with chapter 14's
# comparisons it could be `t > 0.5` just as well (see the follow-up at the end).
#
# Why: a Relax `If` is an expression: each branch is a block of bindings,
# and the `If` yields one value, the last binding of whichever branch ran.
# Python's `if` assigns variables instead. So the code generator works out
# which names flow out of the `if`: those assigned in a branch that existed
# before it (either branch may change them), and those assigned in both
# branches. Each branch ends by packing those names' values into a tuple,
# bound to the same name in both branches (Relax requires that), and after
# the `If` each name is unpacked from the result. An `if` without `else`
# gets an `else` that passes the old values through.
#
# Names assigned in only one branch, and new there, are local to it: the
# symbol table becomes a stack of frames, one per branch, and a branch's
# frame is dropped when it ends. (Python would keep such a name, and fail
# at run time when the other branch ran; here the error comes at compile
# time, at the line that uses it.)
#
# Where the dataflow blocks go: ConvertToDataflow puts side-effect-free
# bindings into `R.dataflow()` blocks, but an `If` is control flow, so it
# cuts the function into a block before it, a block in each branch and a
# block after it; the tuples that carry the branch values sit just outside
# the branch blocks. FuseOps then fuses inside the function's top-level
# blocks only: the adds inside the branches stay separate kernels. (Chapter
# 17 moves loop bodies into functions of their own, where they fuse again.)
#
# Also new: TVM's memory planner (the pass StaticPlanBlockMemory) can let
# code after an `If` reuse storage that was allocated inside the branch
# that did not run, which crashes (apache/tvm issue 17348). Modules that
# branch are built without that pass.
#
# What to look at: `if flag:` in the Relax, the tuples `if_z_u = ...` at
# the end of both branches and `z = if_z_u[0]` after (Relax renames the
# user's `z` to `z_1`, `z_2` where it is bound again: each binding is a new
# variable); the `else:` that the if-without-else received; the dataflow
# blocks after ConvertToDataflow; and after FuseTIR, the three `add` kernels
# inside the then-branch next to the fused one after the `if`.
#
# Run: python exercises/16_if_else.py
import ast
import contextlib
import importlib

import torch
import tvm
import tvm_ffi
from tvm import relax as rx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import relax as RB

import pathlib  # the starter's own lines: chapter 13 is in chapters/, beside exercises/
import sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor


class Scope:
    """The symbol table as a stack of frames: lookups search from the innermost frame out,
    assignments go to the innermost frame, and a frame's names vanish with it."""

    def __init__(self):
        self.frames = [{}]

    @contextlib.contextmanager
    def frame(self):
        self.frames.append({})
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def __contains__(self, name):
        return any(name in frame for frame in self.frames)

    def __getitem__(self, name):
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise KeyError(name)

    def __setitem__(self, name, value):
        self.frames[-1][name] = value


def assigned_names(statements):
    """The names a block of statements assigns, in order of first assignment (nested blocks too)."""
    names = []
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                names.append(node.id)
    return names


def has_if(mod):
    """Whether any Relax function of the module branches."""
    return any(isinstance(binding.value, rx.If)
               for func in mod.functions.values() if isinstance(func, rx.Function)
               for block in func.body.blocks for binding in block.bindings)


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def __init__(self, fn):
        super().__init__(fn)
        self.symbols = Scope()
        self.local_to = {}  # name -> where it was assigned and dropped: "one branch of the `if` on line 7"
        self.branch_depth = 0

    def visit_Name(self, node):
        if node.id not in self.symbols and node.id in self.local_to:
            raise self.error(node, f"name {node.id!r} is only assigned in {self.local_to[node.id]}, "
                                   "so it has no value here")
        return super().visit_Name(node)

    def visit_Return(self, node):
        if self.branch_depth:
            raise self.error(node, "`return` inside an `if` is not supported: assign the result to a "
                                   "variable and return it after the `if`")
        super().visit_Return(node)

    def visit_If(self, node):
        raise NotImplementedError("exercise 3 (if/else): CodeGenerator.visit_If")

    def file_line(self, node):
        return node.lineno + self.fn.__code__.co_firstlineno - 1

    def branch(self, body, outputs, label, expected=None):
        """Compile one branch in its own frame; end it with the tuple of the values that flow out."""
        raise NotImplementedError("exercise 3 (if/else): CodeGenerator.branch")


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    def build(self, mod):
        if not has_if(mod):
            return super().build(mod)
        with tvm.transform.PassContext(opt_level=3, disabled_pass=["StaticPlanBlockMemory"]):
            return super().build(mod)


jit = JIT.decorator


def kernels_called(mod, name):
    """The PrimFuncs a Relax function calls, in order (inside its branches too)."""
    return [call.args[0].name_hint for call in _calls(mod[name].body)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"]


def _calls(expr):
    if isinstance(expr, rx.SeqExpr):
        for block in expr.blocks:
            for binding in block.bindings:
                yield from _calls(binding.value)
        yield from _calls(expr.body)
    elif isinstance(expr, rx.If):
        yield from _calls(expr.true_branch)
        yield from _calls(expr.false_branch)
    elif isinstance(expr, rx.Call):
        yield expr


# ---- Follow-up, beyond the lesson ------------------------------------------------------------
# - A condition computed in the function (`if t > 0.5:`) needs comparisons: chapter 14 has them
#   (a comparison of 0-d tensors is a 0-d bool tensor, a condition like any other).
# - A condition known while compiling (`if 2 > 1:`, possible once numbers stay Python numbers as
#   in chapter 14) needs no `If`: compile only the branch it selects.
# - A Python number assigned in a branch must become a tensor of the type the name had before.
# The package does all three, plus `return`/`break` inside branches: babytriton/codegen/control.py.


if __name__ == "__main__":

    @jit
    def choose(x: Tensor((2, 3), "float32"), y: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        z = x + y
        if flag:
            w = z + z  # new in this branch only: local to it
            z = w + x
            u = z + y
        else:
            u = x + 1.0
        return z + u + x

    mod = choose.codegen()
    print("Relax, as generated:")
    print(mod.script())
    steps = choose.passes()
    mod = steps[0](mod)
    print("\n========== after ConvertToDataflow ==========")
    print(mod.script())
    for p in steps[1:]:
        mod = p(mod)
    print("\n========== after FuseTIR: the Relax function ==========")
    print(mod["choose"].script())
    called = kernels_called(mod, "choose")
    print("kernels called:", called)

    @jit
    def maybe_double(x: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        y = x + 1.0
        if flag:
            y = y + y
        return y + x

    print("\nAn `if` without `else` gets an `else` that passes `y` through:")
    print(maybe_double.codegen().script())

    x, y = torch.rand(2, 3), torch.rand(2, 3)
    for flag in (True, False):
        flag = torch.tensor(flag)
        torch.testing.assert_close(choose(Tensor.of(x), Tensor.of(y), Tensor.of(flag)), choose.fn(x, y, flag))
        torch.testing.assert_close(maybe_double(Tensor.of(x), Tensor.of(flag)), maybe_double.fn(x, flag))
    print("Both functions match torch, with the condition true and false.")

    @jit
    def leaks(x: Tensor((2, 3), "float32"), flag: Tensor((), "bool")):
        if flag:
            w = x + x
        return w

    try:
        leaks.codegen()
        raise AssertionError("a name assigned in one branch only should not be visible after the if")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}\n  {err.text.strip()}")

    print("Checking: one If, dataflow blocks around and inside it, fusion only outside the branches")
    script = choose.codegen().script()
    assert "if flag:" in script and script.count("if_z_u: R.Tuple") == 2 and "= if_z_u[1]" in script
    assert "else:" in maybe_double.codegen().script()
    # one add before the `if`, three unfused in the then-branch, `x + 1.0` in the else-branch, and
    # the two adds after the `if` fused into one kernel
    assert called == ["add", "add", "add", "add", "add1", "fused_add_add"]
