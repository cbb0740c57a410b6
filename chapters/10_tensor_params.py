# Chapter 10 - tensor parameters from annotations; LegalizeOps brings in TIR
#
# What: functions take tensors now. `def f(a: Tensor((2, 3), "float32"), ...)`
# declares each parameter's shape and dtype, and `visit_arguments` turns every
# annotation into a Relax parameter `R.Tensor((2, 3), dtype="float32")`,
# entered in the symbol table under its Python name. A call passes `Tensor`
# objects holding data (chapter 09's `Tensor.of`), and we compare the result with
# torch. The build gains an explicit lowering step, `lower`, that runs the
# pass `LegalizeOps` before `tvm.compile`.
#
# Why: Python evaluates annotations when it runs the `def`, so we do not need
# to compile them ourselves: `inspect.get_annotations` hands us the `Tensor`
# objects. `LegalizeOps` is the step where Relax's high-level `R.add` becomes
# something a machine can run: a TIR `PrimFunc` with explicit loops over the
# elements, called through `R.call_tir`. `tvm.compile` ran it silently in
# chapter 08; running it ourselves lets us print the IR on both sides, and
# gives later chapters a place to add passes (`passes()`).
#
# What to look at: before, `R.add(a, b)`. After, a `@T.prim_func def add`
# (named after the operator, not after our function) with a
# `T.grid(T.int64(2), T.int64(3))` loop nest and one `T.sblock` that computes
# `T_add[v_ax0, v_ax1] = a[...] + b[...]`; the Relax function now calls it
# with `R.call_tir(cls.add, (a, b), out_ty=...)`. Relax decides what to
# compute and allocates the output; TIR says how, element by element.
#
# Run: python chapters/10_tensor_params.py
import importlib
import inspect

import torch
import tvm
from tvm import relax as rx
from tvm.script import relax as R
from tvm.script.ir_builder import relax as RB

ch09 = importlib.import_module("09_tensor")
Tensor = ch09.Tensor


class CodeGenerator(ch09.JIT.CodeGenerator):  # last extended in chapter 07
    def visit_arguments(self, node):
        starred = [a for a in (node.vararg, node.kwarg) if a]
        others = node.posonlyargs + node.kwonlyargs + starred + node.defaults
        if others:
            raise self.error(others[0], "only plain parameters, without defaults, are supported")
        annotations = inspect.get_annotations(self.fn, eval_str=True)
        for arg in node.args:
            ann = annotations.get(arg.arg)
            if not isinstance(ann, Tensor):
                raise self.error(arg, f"parameter {arg.arg!r} needs an annotation "
                                      "such as Tensor((2, 3), 'float32')")
            self.symbols[arg.arg] = RB.arg(arg.arg, R.Tensor(ann.shape, ann.dtype))


class JIT(ch09.JIT):
    CodeGenerator = CodeGenerator

    def passes(self):
        return [rx.transform.LegalizeOps()]

    def lower(self, mod):
        for p in self.passes():
            mod = p(mod)
        return mod

    def compile(self):
        return self.build(self.lower(self.codegen()))

    def __call__(self, *args):
        return super().__call__(*(a.data if isinstance(a, Tensor) else a for a in args))


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def add_tensors(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a + b

    mod = add_tensors.codegen()
    print("Relax, as generated:")
    print(mod.script())
    lowered = add_tensors.lower(mod)
    print("\nAfter LegalizeOps:")
    print(lowered.script())

    ta, tb = torch.rand(2, 3), torch.rand(2, 3)
    out = add_tensors(Tensor.of(ta), Tensor.of(tb))
    print("\nadd_tensors(a, b) =", out)

    print("Checking: the PrimFunc add ran on the CPU and matches torch")
    torch.testing.assert_close(out, ta + tb)
    assert any(isinstance(f, tvm.tirx.PrimFunc) for f in lowered.functions.values())
