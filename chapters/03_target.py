# Chapter 03 - a `target` argument: where should the code run?
#
# What: `@jit` learns an option, `target="cpu"` (the default) or `target="gpu"`.
# The JIT object stores it. Nothing uses it yet: chapter 08 turns "cpu" into an
# LLVM build, chapter 11 turns "gpu" into a CUDA build.
#
# Why: the same Python function can be compiled for different hardware, and the
# user picks which. Putting the choice on the decorator keeps it next to the
# function. It also changes how the decorator is written: `@jit` is called with
# the function, but `@jit(target="gpu")` is called with options first and must
# return the real decorator. `JIT.decorator` handles both spellings.
#
# What to look at: both functions report their target, and a misspelt target
# is refused when the function is decorated, not when it is first called.
#
# Run: python chapters/03_target.py
import functools
import importlib

ch02 = importlib.import_module("02_parse")

TARGETS = ("cpu", "gpu")


class JIT(ch02.JIT):
    def __init__(self, fn, target="cpu"):
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
        super().__init__(fn)
        self.target = target

    @classmethod
    def decorator(cls, fn=None, *, target="cpu"):
        """`@jit` passes the function; `@jit(target=...)` passes none and gets a decorator back."""
        if fn is None:
            return functools.partial(cls, target=target)
        return cls(fn, target=target)

    def __call__(self, *args):
        print(f"[jit] {self.fn.__name__}: compiling for target={self.target!r}")
        return self.parse()


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def on_cpu():
        pass

    @jit(target="gpu")
    def on_gpu():
        pass

    on_cpu()
    on_gpu()

    try:
        jit(target="tpu")(on_cpu.fn)
        raise AssertionError("an unknown target should be refused")
    except ValueError as err:
        print("refused:", err)

    print("Checking: both spellings of the decorator work and the target is stored")
    assert (on_cpu.target, on_gpu.target) == ("cpu", "gpu")
