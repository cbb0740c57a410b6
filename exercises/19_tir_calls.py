# Exercise starter for chapter 19 - calling a TensorIR function you wrote yourself
#
# Exercise 6 of the tutorial (calling your own TensorIR), to solve on chapter 13. Fill in the
# functions that raise NotImplementedError("exercise 6 ..."); the comments below say what the
# finished chapter does. Check your answer with `pytest exercises -k 19_tir_calls`; the solution is
# chapters/19_tir_calls.py, and `diff exercises/19_tir_calls.py chapters/19_tir_calls.py` shows it.
#
# What: a `@T.prim_func` written in TVMScript (loops and blocks, the same
# kind of TIR that LegalizeOps generates for `R.add`) can be called from a
# jitted function like a library operator: `z = scale_add(x, y)`. The code
# generator adds the PrimFunc to the IRModule and emits `R.call_tir`, the
# Relax instruction that runs a PrimFunc on tensors.
#
# Why: when the library lacks an operator, or you know a better loop nest
# for one, you write the TIR yourself and the rest of the pipeline treats
# it like LegalizeOps' output: AnnotateTIROpPattern works out that the
# kernel is elementwise, FuseOps and FuseTIR fuse it with its neighbours,
# and Dlight schedules it for the GPU.
#
# TIR functions use *destination passing*: the caller allocates the output
# and passes it as the last buffer (`out` below), and the function writes
# into it. Relax's `call_tir` does the allocation itself; it only needs the
# output's shape and dtype (`out_ty`). Two ways to supply them:
#   1. The 2024 tutorial's way, with a placeholder: pass as many arguments
#      as the kernel has buffers, the last one a stand-in for the output,
#      `scale_add(x, y, Tensor((4, 8), "float32"))`. The placeholder's only
#      job is its type: call_tir gets the inputs, and the type as `out_ty`.
#   2. Without: leave the output out, `scale_add(x, y)`; its shape and dtype
#      are in the kernel's own signature, where the code generator reads them.
# Either way the inputs are checked against the kernel's buffers first, at
# the line of the call.
#
# Two details make a hand-written kernel fuse like LegalizeOps' own:
# `private=True` (a public function keeps its name as an exported symbol, so
# dead-code elimination cannot drop it once fused), and sizes written as
# `T.int64(4)`: FuseTIR merges buffers only when their types are identical,
# and LegalizeOps writes int64 sizes where `T.Buffer((4, 8))` would mean
# int32. (The package widens int32 sizes itself and allows symbolic ones;
# this chapter asks for int64 and says so.)
#
# What to look at: `R.call_tir(cls.scale_add, (x, y), out_ty=...)` in both
# versions (the placeholder has disappeared from the first), the kernel
# `scale_add` in the module beside the Relax function, and after fusion the
# single PrimFunc `fused_scale_add_add`.
#
# Run: python exercises/19_tir_calls.py
import ast
import importlib

import torch
import tvm
from tvm import relax as rx
from tvm.script import tirx as T
from tvm.script.ir_builder import ir as I

from tvm.script.ir_builder import relax as RB

import pathlib  # the starter's own lines: chapter 13 is in chapters/, beside exercises/
import sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))
ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor


def buffer_text(ty):
    return f"{ty.dtype} tensor of shape {tuple(int(d) for d in ty.shape)}"


def is_tensor(value):
    return isinstance(value, rx.Expr)


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def __init__(self, fn):
        super().__init__(fn)
        self.kernels = []  # (PrimFunc, its GlobalVar in the module being built)

    def visit_Call(self, node):
        raise NotImplementedError("exercise 6 (calling your own TensorIR): CodeGenerator.visit_Call")

    def callee(self, func):
        """The Python object a called name stands for, found as Python finds it: in the globals."""
        if isinstance(func, ast.Name) and func.id in self.fn.__globals__:
            return self.fn.__globals__[func.id]
        raise self.error(func, f"`{ast.unparse(func)}` is not a kernel defined in this file")

    def value(self, node):
        """An argument's value, bound to a variable if it is an expression, so that its type is known."""
        value = self.visit(node)
        return value if not isinstance(value, rx.Call) else RB.emit(value)

    def call_kernel(self, node, name, kernel):
        raise NotImplementedError("exercise 6 (calling your own TensorIR): CodeGenerator.call_kernel")

    def check(self, node, name, what, ty, buffer):
        if any(not isinstance(d, tvm.tirx.IntImm) or str(d.ty) != "int64" for d in buffer.shape):
            raise self.error(node, f"`{name}` declares a buffer of shape {list(buffer.shape)}: write its sizes "
                                   "as T.int64(...), as LegalizeOps does, so that FuseTIR can fuse it")
        want = (tuple(int(d) for d in buffer.shape), str(buffer.dtype))
        if (tuple(int(d) for d in ty.shape), str(ty.dtype)) != want:
            raise self.error(node, f"`{name}` takes a {buffer_text(buffer)} there, but {what} is a "
                                   f"{buffer_text(ty)}")

    def declare(self, name, kernel):
        """Add the kernel to the IRModule being built, once, and return its GlobalVar."""
        raise NotImplementedError("exercise 6 (calling your own TensorIR): CodeGenerator.declare")


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


@T.prim_func(s_tir=True, private=True)
def scale_add(a: T.Buffer((T.int64(4), T.int64(8)), "float32"), b: T.Buffer((T.int64(4), T.int64(8)), "float32"),
              out: T.Buffer((T.int64(4), T.int64(8)), "float32")):
    for i, j in T.grid(T.int64(4), T.int64(8)):
        with T.sblock("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = a[vi, vj] * T.float32(2.0) + b[vi, vj]


if __name__ == "__main__":

    @jit
    def with_placeholder(x: Tensor((4, 8), "float32"), y: Tensor((4, 8), "float32")):
        z = scale_add(x, y, Tensor((4, 8), "float32"))
        return z + x

    @jit
    def without(x: Tensor((4, 8), "float32"), y: Tensor((4, 8), "float32")):
        z = scale_add(x, y)
        return z + x

    first = with_placeholder.codegen()
    print("1. With a placeholder for the output:")
    print(first.script())
    second = without.codegen()
    relax_text = second["without"].script()
    print("\n2. Without: the output's type comes from the kernel's signature")
    print(relax_text)
    fused = without.lower(second)
    print("\nAfter fusion, the hand-written kernel and the add are one PrimFunc:")
    print(fused.script())

    x, y = torch.rand(4, 8), torch.rand(4, 8)
    for jitted in (with_placeholder, without):
        torch.testing.assert_close(jitted(Tensor.of(x), Tensor.of(y)), x * 2 + y + x)
    print("Both versions match torch.")

    @jit
    def wrong_shape(x: Tensor((4, 8), "float32"), w: Tensor((8, 4), "float32")):
        return scale_add(x, w)

    try:
        wrong_shape.codegen()
        raise AssertionError("a tensor of the wrong shape should be refused")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}\n  {err.text.strip()}")

    print("Checking: call_tir with the same out_ty both ways, and one fused kernel")
    assert first["with_placeholder"].script() == relax_text.replace("def without", "def with_placeholder")
    call = 'R.call_tir(cls.scale_add, (x, y), out_ty=R.Tensor((4, 8), dtype="float32"))'
    assert call in first.script() and call in second.script()
    assert ch13.launches(without) == ["fused_scale_add_add"]
    assert "scale_add" not in [gv.name_hint for gv in fused.get_global_vars()]
