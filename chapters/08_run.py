# Chapter 08 - build with `tvm.compile` and run on the Relax VM
#
# What: calling a jitted function now really runs it. The first call builds
# the IRModule with `tvm.compile` for the CPU (an LLVM target), loads the
# result into a Relax `VirtualMachine`, and keeps both; every call then looks
# the function up by name in the VM and calls it.
#
# Why: Relax functions are not machine code by themselves. `tvm.compile`
# lowers each tensor operator to a loop nest (TIR), compiles those loops with
# LLVM into a native library, and turns the Relax function into a short
# program of VM instructions that allocate tensors and call the compiled
# loops. The VM is the interpreter for that program. Building is slow
# compared to a call, so it happens once, on the first call: that is the
# "just in time" of a JIT.
#
# What to look at: the VM program printed by `as_text()`. `R.add` is gone; in
# its place the VM allocates storage and a tensor for the result, then calls
# `add`, a native function compiled by LLVM. `add` receives only the constant
# `one` (`c[0]`) and the output (`%1`): the literal `1` on the right of the `+`
# was baked into the compiled loop. And the call returns a TVM tensor holding 2.
#
# Run: python chapters/08_run.py
import functools
import importlib

import tvm
from tvm import relax as rx

ch07 = importlib.import_module("07_assign")


class JIT(ch07.JIT):
    def tvm_target(self):
        if self.target != "cpu":
            raise NotImplementedError(f"no backend for target={self.target!r} yet")
        return tvm.target.Target("llvm")

    def device(self):
        return tvm.cpu()

    def build(self, mod):
        return tvm.compile(mod, target=self.tvm_target())

    def compile(self):
        return self.build(self.codegen())

    @functools.cached_property
    def executable(self):
        return self.compile()

    @functools.cached_property
    def vm(self):
        return rx.VirtualMachine(self.executable, self.device())

    def __call__(self, *args):
        return self.vm[self.fn.__name__](*args)


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def one_plus_one():
        one = 1
        result = one + 1
        return result

    out = one_plus_one()
    print("The VM program that tvm.compile produced:")
    print(one_plus_one.executable.as_text())
    print("one_plus_one() returned", repr(out))

    print("Checking: compiled for the CPU and ran on the Relax VM")
    assert out.numpy() == 2 and out.dtype == "int32"
    assert one_plus_one.vm is one_plus_one.vm  # built once, reused by later calls
